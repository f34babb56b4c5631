"""The rewrite search's modes and bounds by name: what the command line offers as choices, kept apart from the
search so that reading them imports nothing (the command line starts without loading the rewrite stage)."""

#: the relaxed phase's bound on a graph's operators, as a multiple of the original's
MAX_GROWTH = 1.5

#: how a graph is verified: whole, each one the search uses, or its last substitution alone (once per signature)
VERIFY_MODES = ("each", "site")

#: how a candidate is priced when generated: by an upper bound (a real plan's cost) that is made exact when the
#: candidate is expanded or returned (:meth:`Objective.estimate_near`), that bound with the deltas of the same
#: substitution in the same context reused from an earlier expansion (:meth:`Objective.site_context`), or exactly
PRICINGS = ("reuse", "lazy", "exact")
