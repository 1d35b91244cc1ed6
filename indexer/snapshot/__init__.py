"""Snapshots: frozen, named, relocatable copies of an index, and archives of them.

``store`` keeps them in the cache directory, ``nearest`` picks one for a checkout,
``archive`` moves them between machines, ``diff`` compares two. The names below are
imported on first use: a selection reads ``fingerprint`` alone, and must not load the
store (and the index build it locks with) to do so.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_WHERE = {
    "export_snapshot": "archive",
    "import_snapshot": "archive",
    "diff_databases": "diff",
    "validate_name": "names",
    "Nearest": "nearest",
    "find_nearest": "nearest",
    "SnapshotError": "store",
    "SnapshotInfo": "store",
    "delete_snapshot": "store",
    "install_snapshot": "store",
    "list_snapshots": "store",
    "read_info": "store",
    "save_snapshot": "store",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{module}"), name)
