"""The ``fuseplan`` command line: a thin layer over the library, one module per command or family of commands.

Every user error becomes one ``error: ...`` line on stderr and exit status 2. The command modules register
themselves on the shared app when imported; their import order is the order ``fuseplan --help`` lists them in.
"""

from fuseplan.cli import zoo, inspect, plan, rewrite, passes, validate, simulate, report, learning, sweep
from fuseplan.cli.entry import main, run

# in the order `fuseplan --help` lists them
COMMAND_MODULES = (zoo, inspect, plan, rewrite, passes, validate, simulate, report, learning, sweep)

__all__ = ["main", "run"]
