"""Small shared helpers: atomic files and checksums, sharded arrays, processes, threads."""
