"""Stage 5: reports on graphs, costs and plans, for people and for machines."""

from fuseplan.report.inspect import InspectReport, inspect_model

__all__ = ["InspectReport", "inspect_model"]
