"""The live gate before issue #45 (an adaptive in-flight cap per engine, a learned burst
limit, borrowing past the cap), kept as the overload scenario's baseline "today".
docs/admission.md, "History: the adaptive cap", tells how it was tuned and why it went.
"""
