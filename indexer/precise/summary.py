"""How precise mode's summary (``meta.precise``, made by indexer.precise.layer) reads."""

from __future__ import annotations

from typing import Any


def describe(summary: dict[str, Any] | None) -> str:
    """One line on precise mode for ``get_status`` and the CLI."""
    if summary is None:
        return "precise C++ mode did not run (a partial index, or one built before it existed)"
    if summary.get("mode") != "on":
        return f"precise C++ mode off: {summary.get('reason')}"
    merge = summary.get("merge", {})
    return (
        f"precise C++ mode: {summary['tus']} TUs from {summary['database']} "
        f"({summary['parsed']} parsed, {summary['cached']} cached, {summary['failed']} failed, "
        f"{summary.get('cuda_left_to_fast', 0)} CUDA left to the fast graph) in "
        f"{summary.get('seconds', 0):.1f}s; {merge.get('edges', 0)} compiler-resolved call "
        f"edges ({merge.get('confirmed', 0)} confirmed, {merge.get('added', 0)} added, "
        f"{merge.get('removed', 0)} name-matched removed, "
        f"{merge.get('ambiguities_resolved', 0)} ambiguities resolved)"
    )
