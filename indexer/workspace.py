"""Which source tree, which harness and which index a command works on.

Shared by the CLI, the pytest plugin and the MCP server so that all three agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from indexer.errors import UsageError
from indexer.gitinfo import GIT_MISSING, git_missing, repo_root
from indexer.harness import Manifest, select_manifest
from indexer.locations import index_path, load_config, require_source


@dataclass(frozen=True)
class Workspace:
    source: Path  # absolute, resolved
    manifest: Manifest
    chosen_by: str  # how the manifest was chosen: --harness, .torchtalk.toml, ...
    source_from: str = "given"  # how the source was chosen: given, configured default, cwd

    @property
    def harness(self) -> str:
        return self.manifest.name

    @property
    def db_path(self) -> Path:
        return index_path(self.source, self.manifest.name)

    @classmethod
    def resolve(cls, source: str | Path | None = None, harness: str | None = None) -> Workspace:
        """``source``/``harness`` as given, else the configured defaults (``torchtalk init``),
        else the git repository of the current directory (as git itself, and the pytest
        plugin's rootdir)."""
        config = load_config()
        source_from = "given"
        if source is None and config.source is not None:
            source, source_from = config.source, CONFIGURED
        if source is None:
            source, source_from = _current_repository(), CURRENT_REPOSITORY
        root = require_source(source)
        configured = config.harness_for(root)
        manifest, chosen_by = select_manifest(root, explicit=harness, configured=configured)
        return cls(root, manifest, chosen_by, source_from)


CONFIGURED = "the configured default"
CURRENT_REPOSITORY = "the git repository of the current directory"


def _current_repository() -> Path:
    root = repo_root(Path.cwd())
    if root is None and git_missing():
        raise UsageError(f"no source tree given, and {GIT_MISSING}")
    if root is None:
        raise UsageError(
            "no source tree: the current directory is in no git repository; pass --source "
            "PATH, or run 'torchtalk init --source PATH' once"
        )
    return root
