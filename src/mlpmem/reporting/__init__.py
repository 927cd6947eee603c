"""Tables and figures of measured results (every number read from a run folder)."""
