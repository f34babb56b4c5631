"""Errors that reach the user as one line of text."""


class FuseplanError(Exception):
    """A problem with the user's input (file, model, option).

    The command-line interface prints ``error: <message>`` and exits with
    status 2; library users catch it like any other exception.
    """


def first_line(exc: BaseException) -> str:
    """The first non-blank line of ``exc``'s message, else the name of its type (an ``EOFError`` from an
    empty file has no message), for quoting a library's error in a :class:`FuseplanError`."""
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)


SHOWN_WHOLE = 60  # characters of a user's value an error message shows whole; a longer one shows its start
_SHOWN_START = 40


def shown(value: object, *, quote: bool = True, whole: int = SHOWN_WHOLE) -> str:
    """``value`` for an error message, quoted (its ``repr``) unless ``quote`` is false, and cut short when long:
    past ``whole`` characters, its first characters quoted and its length, so that a 100,000-character option or
    path still gives one readable line that says what was wrong.

    >>> shown("dp"), shown("x" * 5000)
    ("'dp'", "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'... (5,000 characters)")
    """
    text = str(value)
    if len(text) <= whole:
        return repr(value) if quote else text
    return f"{text[:_SHOWN_START]!r}... ({len(text):,} characters)"


_CONTROL = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7f) if chr(code) not in "\n\t"}


def printable(text: str) -> str:
    """``text`` with its control characters (ESC, NUL, CR, ...) written as ``\\xNN`` escapes, so that names and
    paths from a user's files cannot move the cursor, recolour or clear a terminal when printed."""
    return text.translate(_CONTROL)
