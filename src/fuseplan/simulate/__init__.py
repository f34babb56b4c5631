"""The referee: run a plan's schedules tile by tile inside the buffer and count what really moves.

The simulator reads schedules (:mod:`fuseplan.schedule`) and the model, never
the pricing code.
"""
