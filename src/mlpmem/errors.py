"""Errors with one-line messages that name the cause."""


class MlpmemError(Exception):
    """Base class: every user-facing failure of mlpmem is one of these."""


class ConfigError(MlpmemError, ValueError):
    """A configuration value is out of range or inconsistent."""


class CorpusError(MlpmemError):
    """The corpus is empty, unreadable, or too short."""


class FingerprintMismatch(MlpmemError):
    """An artifact was built with another backbone, tokenizer, layer or site."""


class CorruptArtifact(MlpmemError):
    """A shard, index or checkpoint fails its checksum or shape check."""
