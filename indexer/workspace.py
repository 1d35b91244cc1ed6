"""Which source tree, which harness and which index a command works on.

Shared by the CLI, the pytest plugin and the MCP server so that all three agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from indexer.errors import UsageError
from indexer.harness import Manifest, select_manifest
from indexer.locations import index_path, load_config, require_source


@dataclass(frozen=True)
class Workspace:
    source: Path  # absolute, resolved
    manifest: Manifest
    chosen_by: str  # how the manifest was chosen: --harness, .torchtalk.toml, ...

    @property
    def harness(self) -> str:
        return self.manifest.name

    @property
    def db_path(self) -> Path:
        return index_path(self.source, self.manifest.name)

    @classmethod
    def resolve(cls, source: str | Path | None = None, harness: str | None = None) -> Workspace:
        """``source``/``harness`` as given, else the configured defaults (``torchtalk init``)."""
        config = load_config()
        if source is None:
            source = config.source
            if source is None:
                raise UsageError(
                    "no source tree given: pass --source PATH or run 'torchtalk init --source PATH'"
                )
        root = require_source(source)
        configured = config.harness_for(root)
        manifest, chosen_by = select_manifest(root, explicit=harness, configured=configured)
        return cls(root, manifest, chosen_by)
