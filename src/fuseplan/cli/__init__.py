"""The ``fuseplan`` command line: a thin layer over the library, one module per command or family of commands.

Every user error becomes one ``error: ...`` line on stderr and exit status 2. The command modules register
themselves on the shared app when imported; their import order is the order ``fuseplan --help`` lists them in.
"""

from fuseplan.cli import zoo, inspect, plan, rewrite, passes, validate, simulate, report, learning, sweep  # noqa: F401
from fuseplan.cli.entry import main, run

__all__ = ["main", "run"]
