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
