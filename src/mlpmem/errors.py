"""Errors with one-line messages that name the cause.

The CLI prints any of them as one line and exits with the error's :attr:`MlpmemError.exit_code`.
"""


class MlpmemError(Exception):
    """Base class: every user-facing failure of mlpmem is one of these."""

    exit_code = 2
    """The CLI's exit status for this error (README, "Exit codes")."""


class ConfigError(MlpmemError, ValueError):
    """A configuration value is out of range or inconsistent."""


class CorpusError(MlpmemError):
    """The corpus is empty, unreadable, or too short."""


class FingerprintMismatch(MlpmemError):
    """An artifact was built with another backbone, tokenizer, layer or site."""


class CorruptArtifact(MlpmemError):
    """A shard, index or checkpoint fails its checksum or shape check."""


class StaleArtifact(MlpmemError):
    """A stage's artifact was built under other settings than the configuration asks for now."""


class ReadOnlyFolder(MlpmemError):
    """A folder mlpmem must write cannot be written (a read-only file system, no permission)."""


class RunBusy(MlpmemError):
    """Another live process holds the run folder's lock."""

    exit_code = 3
