"""Evaluation data that installs from the package registries: read from the files packages ship, never from a hub."""
