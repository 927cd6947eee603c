"""Studies that use the mlpmem library: never imported by it."""
