"""Running the command line: dispatch to the commands, one ``error: ...`` line per failure."""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
from collections.abc import Sequence

import typer
import typer.main

from fuseplan.cli.common import WHOLE_WORD, app, one_line, stderr
from fuseplan.cli.signals import SignalGuard, install_guard
from fuseplan.errors import FuseplanError, shown

def _interrupted(guard: SignalGuard) -> int:
    """One line for a stopped command, and the shell's status for the signal that stopped it."""
    signum = guard.received[0] if guard.received else signal.SIGINT
    stderr.print("error: interrupted", highlight=False, markup=False)
    return 128 + int(signum)


def _reader_gone() -> int:
    """The reader of stdout went away (`fuseplan inspect big | head -1`): stop quietly with the status of a
    process killed by SIGPIPE (128 + 13), as C tools end there, so that `set -o pipefail` still sees it."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's final flush of stdout must not fail again
        os.close(devnull)
    except (OSError, ValueError):  # a stdout without a descriptor (captured in tests)
        pass
    return 128 + int(signal.SIGPIPE)


@functools.cache
def _command(modules: tuple[str, ...]) -> typer.core.TyperGroup:
    """The app as the command Typer runs, with the commands of ``modules`` loaded. Calling the app builds it
    again from every command's signature and type hints (about 30 ms of CPU), so it is built once per process
    and set of commands: the tests run the command line hundreds of times in one process. (Calling the app
    would also install Typer's exception hook, which does nothing while the app's pretty exceptions are
    off.)"""
    return typer.main.get_command(app)


def _modules_for(args: Sequence[str]) -> tuple[str, ...]:
    """The command modules a command line needs: the one of the command it names first, or all of them (for
    ``--help``, a mistyped command and anything else the app answers by listing its commands)."""
    from fuseplan.cli import COMMAND_MODULE, COMMAND_MODULES

    module = COMMAND_MODULE.get(args[0]) if args else None  # an option first (--help) names no command
    return COMMAND_MODULES if module is None else (module,)


def run(argv: Sequence[str] | None = None, *, restore_signals: bool = True, only_needed: bool = False) -> int:
    """Run the command line on ``argv`` and return its exit status; every expected failure is one line.

    The Typer app runs with ``standalone_mode=False``, so instead of printing
    a usage box and exiting, Typer raises. Everything it raises for bad usage
    (an unknown option or choice, a missing argument, an extra argument)
    derives from the public ``typer.TyperException`` (since Typer 0.26, which
    vendors click, click's exceptions subclass it; pyproject.toml requires
    it) and carries ``format_message()``; that class and method are all this
    relies on, so no private module is imported. An empty message means Typer has already
    printed the help (a group called without a command). ``--help`` and
    ``typer.Exit`` come back as a returned exit status.

    With ``restore_signals=False`` (the console script, which exits next),
    signals that arrive after the command has finished are ignored rather
    than handed back to Python's default handler, which would turn a late
    Ctrl-C into a traceback during shutdown. With ``only_needed`` (the console
    script) only the module of the command ``argv`` names is imported.
    """
    from fuseplan.cli import COMMAND_MODULES, load_commands

    args = list(sys.argv[1:] if argv is None else argv)
    loaded = load_commands(_modules_for(args) if only_needed else COMMAND_MODULES)
    groups = [group.name for group in app.registered_groups]
    if not args or (len(args) == 1 and args[0] in groups):  # usage is an error: stderr, status 2, never stdout
        command = " ".join(["fuseplan", *args])
        stderr.print(f"error: missing command; usage: {command} COMMAND [ARGS]... (see `{command} --help`)",
                     highlight=False, markup=False)
        return 2
    guard = SignalGuard()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, guard.handle)
    install_guard(guard)
    try:
        status = _command(loaded).main(args=args, prog_name="fuseplan", standalone_mode=False)
        if status == 130 and guard.received:  # Typer turns KeyboardInterrupt into exit status 130
            return _interrupted(guard)
        return status if isinstance(status, int) else 0
    except FuseplanError as exc:
        stderr.print(f"error: {one_line(str(exc))}", highlight=False, markup=False)
        return 2
    except typer.TyperException as exc:
        message = one_line(exc.format_message())
        if message:
            context = getattr(exc, "ctx", None)
            hint = f" (see `{context.command_path} --help`)" if context is not None else ""
            stderr.print(f"error: {message}{hint}", highlight=False, markup=False)
        return 2
    except typer.Abort:
        if guard.received:  # click turns a KeyboardInterrupt raised outside Typer's own handling into Abort
            return _interrupted(guard)
        stderr.print("error: aborted", highlight=False, markup=False)
        return 1
    except BrokenPipeError:
        return _reader_gone()
    except SystemExit as exc:
        if isinstance(exc.__context__, BrokenPipeError):  # click turns a broken pipe into sys.exit(1)
            return _reader_gone()
        raise
    except OSError as exc:  # a disk that fills up or a file that vanishes mid-run
        where = f" ({shown(exc.filename, quote=False, whole=WHOLE_WORD)})" if exc.filename else ""
        stderr.print(f"error: {one_line(exc.strerror or str(exc))}{where}", highlight=False, markup=False)
        return 2
    except KeyboardInterrupt:
        return _interrupted(guard)
    finally:
        install_guard(None)
        guard.phase = "after"
        if restore_signals:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def main() -> None:
    """Console-script entry point."""
    status = run(restore_signals=False, only_needed=True)
    if threading.current_thread() is threading.main_thread():
        # While the interpreter shuts down it resets Python-level handlers to the default action,
        # which would let a late signal kill a run that has already succeeded; ignored stays ignored.
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
    sys.exit(status)
