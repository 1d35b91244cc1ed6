"""Snapshots: frozen, named, relocatable copies of an index, and archives of them.

``store`` keeps them in the cache directory, ``nearest`` picks one for a checkout,
``archive`` moves them between machines, ``diff`` compares two.
"""

from indexer.snapshot.archive import export_snapshot, import_snapshot
from indexer.snapshot.diff import diff_databases
from indexer.snapshot.names import validate_name
from indexer.snapshot.nearest import Nearest, find_nearest
from indexer.snapshot.store import (
    SnapshotError,
    SnapshotInfo,
    delete_snapshot,
    install_snapshot,
    list_snapshots,
    read_info,
    save_snapshot,
)

__all__ = [
    "Nearest",
    "SnapshotError",
    "SnapshotInfo",
    "delete_snapshot",
    "diff_databases",
    "export_snapshot",
    "find_nearest",
    "import_snapshot",
    "install_snapshot",
    "list_snapshots",
    "read_info",
    "save_snapshot",
    "validate_name",
]
