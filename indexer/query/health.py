"""Whether an index reaches the counts its harness expects of a healthy build."""

from __future__ import annotations

from indexer.harness import Manifest


def shortfalls(manifest: Manifest, counts: dict[str, dict[str, int]]) -> list[str]:
    """One line per expected minimum the index misses; keys are node or edge kinds."""
    missing = []
    for kind, minimum in sorted(manifest.expected_minimums.items()):
        have = counts.get("nodes", {}).get(kind, counts.get("edges", {}).get(kind, 0))
        if have < minimum:
            missing.append(f"{kind}: {have} < expected minimum {minimum}")
    return missing
