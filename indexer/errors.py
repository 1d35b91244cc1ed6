"""Errors that reach the user as one line and an exit code."""

from __future__ import annotations


class TorchTalkError(Exception):
    """A failure the user can act on; the CLI prints ``torchtalk: error: <message>``."""

    exit_code = 1


class UsageError(TorchTalkError):
    """Bad input from the user: a flag, a path, a manifest."""

    exit_code = 2


class ManifestError(UsageError):
    """A harness manifest that cannot be used; names the file and the key."""

    def __init__(self, path: str, key: str | None, problem: str) -> None:
        where = f"{path}: {key}" if key else path
        super().__init__(f"{where}: {problem}")
        self.path = path
        self.key = key
        self.problem = problem


class IndexMissingError(TorchTalkError):
    """No index has been built for this source and harness."""


class IndexBusyError(TorchTalkError):
    """Another build holds the lock and the caller asked not to wait."""


class IncompleteBuildError(TorchTalkError):
    """A build that could not read files the index holds; the old index is kept."""
