"""The ``fuseplan`` console script: signal handlers first, then the command line.

Loading the command line imports onnx, numpy, typer and rich, which takes a noticeable moment. A Ctrl-C or
SIGTERM in that moment would otherwise end in a ``KeyboardInterrupt`` traceback, or in a silent kill;
here it ends, like a signal at any later point before the work starts, with one ``error: interrupted``
line and the shell's status for the signal (128 + its number). Nothing has been written yet, so the
process simply exits. :func:`fuseplan.cli.entry.run` replaces these handlers with its own.
"""

from __future__ import annotations

import os
import signal


def _interrupted_at_start(signum: int, frame: object) -> None:
    os.write(2, b"error: interrupted\n")
    os._exit(128 + signum)


def main() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _interrupted_at_start)
    from fuseplan.cli.entry import main as run_command_line

    run_command_line()
