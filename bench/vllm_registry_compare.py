"""Two runs of bench/vllm_registry_selection.py compared, change by change: the files
each selects, the files the second loses, and for each lost file the org/name strings it
holds that the second run's index no longer links (docs/performance.md "vLLM registries").

    python bench/vllm_registry_compare.py BEFORE.jsonl AFTER.jsonl --db AFTER_INDEX.sqlite
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path


def _runs(path: Path) -> dict[str, dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]
    return {row["file"]: row for row in rows}


def _unlinked_ids(db: Path, test_file: str) -> list[str]:
    """The file's ``org/name`` registry strings that link to nothing in the index."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    rows = conn.execute(
        "SELECT DISTINCT r.target FROM refs r JOIN files f ON f.id = r.file_id"
        " WHERE f.path = ? AND r.scheme = 'registry' AND r.target LIKE '%/%'"
        " AND NOT EXISTS (SELECT 1 FROM edges e WHERE e.ref_id = r.id)",
        (test_file,),
    ).fetchall()
    return sorted(target for (target,) in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--db", type=Path, required=True, help="the after run's index.sqlite")
    args = parser.parse_args()
    before, after = _runs(args.before), _runs(args.after)
    print("| changed | before | after | lost | gained | through a registry (after) |")
    print("| --- | --- | --- | --- | --- | --- |")
    lost_all: dict[str, set[str]] = {}
    for rel, row in before.items():
        new = after.get(rel)
        if new is None:
            print(f"| `{rel}` | {row['selected']} | (not run) | | | |")
            continue
        old_files, new_files = set(row["files"]), set(new["files"])
        lost = old_files - new_files
        for path in lost:
            lost_all.setdefault(path, set()).add(rel)
        name = rel.rsplit("/", 1)[-1]
        print(
            f"| `{name}` | {len(old_files)} | {len(new_files)} | {len(lost)} "
            f"| {len(new_files - old_files)} | {new['through_registry']} |"
        )
    print(f"\nfiles lost by any change: {len(lost_all)}")
    for path, changes in sorted(lost_all.items()):
        ids = _unlinked_ids(args.db, path)
        print(f"- {path} ({len(changes)} changes): unlinked org/name strings {ids}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
