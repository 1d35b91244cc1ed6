"""`torchtalk snapshot ...`: save, load, list, delete, diff, export and import snapshots."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from indexer.errors import UsageError
from indexer.snapshot import (
    delete_snapshot,
    diff_databases,
    export_snapshot,
    find_nearest,
    import_snapshot,
    install_snapshot,
    list_snapshots,
    read_info,
    save_snapshot,
    validate_name,
)
from indexer.snapshot.fingerprint import full_commit, short_commit
from indexer.snapshot.nearest import TIER_CONTENT
from indexer.snapshot.store import SnapshotError, SnapshotInfo, check_fits, db_of, match_reason
from indexer.workspace import Workspace
from pytest_torchtalk.cli import add_source_arguments


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "snapshot", help="save, restore and move indexes (for CI: build nightly, load in PRs)"
    )
    actions = parser.add_subparsers(dest="snapshot_command", metavar="ACTION")
    actions.required = True

    def action(name: str, help_text: str, handler) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=help_text)
        add_source_arguments(sub)
        sub.set_defaults(handler=handler)
        return sub

    save = action("save", "freeze the current index under NAME (e.g. main/abc1234/v1)", run_save)
    save.add_argument("name", metavar="NAME")
    save.add_argument("--force", action="store_true", help="save even if the index is stale")

    load = action("load", "make a snapshot this tree's index", run_load)
    load.add_argument("name", metavar="NAME", nargs="?")
    load.add_argument(
        "--nearest",
        action="store_true",
        help="pick by content, then commit, then nearest ancestor commit",
    )
    load.add_argument(
        "--force", action="store_true", help="load even if it matches neither content nor path"
    )

    listing = action("list", "list snapshots, newest first", run_list)
    listing.add_argument("--json", action="store_true", help="machine-readable output")

    delete = action("delete", "delete a snapshot", run_delete)
    delete.add_argument("name", metavar="NAME")

    diff = action("diff", "what changed from snapshot A to snapshot B", run_diff)
    diff.add_argument("a", metavar="A")
    diff.add_argument("b", metavar="B")
    diff.add_argument("--json", action="store_true", help="machine-readable output")

    export = action("export", "write a snapshot to a .tar.gz", run_export)
    export.add_argument("name", metavar="NAME")
    export.add_argument("-o", "--output", metavar="FILE", help="archive path or directory")

    imp = action("import", "install a snapshot from a .tar.gz (checked first)", run_import)
    imp.add_argument("file", metavar="FILE")
    imp.add_argument("--name", metavar="NEW", help="install under this name")
    imp.add_argument("--force", action="store_true", help="replace a snapshot of that name")


def _counts(info: SnapshotInfo) -> str:
    nodes = sum(info.counts.get("nodes", {}).values())
    edges = sum(info.counts.get("edges", {}).values())
    return f"{info.counts.get('files', 0)} files, {nodes} nodes, {edges} edges"


def run_save(args: argparse.Namespace) -> int:
    validate_name(args.name)
    workspace = Workspace.resolve(args.source, args.harness)
    info = save_snapshot(workspace, args.name, force=args.force)
    if info.content_fingerprint is None:
        print(
            f"warning: snapshot {info.name!r} records no content fingerprint (stale index or "
            "not a git tree); it loads by path, commit or --force only",
            file=sys.stderr,
        )
    print(
        f"saved snapshot {info.name} ({info.harness}, commit {info.git_commit or '-'}): "
        f"{_counts(info)}, {info.db_bytes / 1e6:.1f} MB"
    )
    return 0


def _stale_note(workspace: Workspace, info: SnapshotInfo) -> None:
    head = full_commit(workspace.source)
    print(
        f"note: the snapshot (commit {info.git_commit or '-'}) may differ from this tree (HEAD "
        f"{short_commit(head) or '-'}); run 'torchtalk index update' to bring it up to date",
        file=sys.stderr,
    )


def run_load(args: argparse.Namespace) -> int:
    if args.nearest == (args.name is not None):
        raise UsageError("snapshot load takes a NAME or --nearest (one of them)")
    workspace = Workspace.resolve(args.source, args.harness)
    if args.nearest:
        nearest = find_nearest(workspace)
        info, how = nearest.info, nearest.tier
        print(f"nearest snapshot: {info.name}, by {how} ({nearest.detail})")
    else:
        info = read_info(validate_name(args.name))
        check_fits(workspace, info)
        reason = match_reason(workspace, info)
        if reason is None:
            problem = (
                f"snapshot {info.name!r} matches neither this tree's content nor its path "
                f"(built at commit {info.git_commit or '-'} in {info.source_path})"
            )
            if not args.force:
                raise SnapshotError(f"{problem}; pass --force to load it anyway")
            print(f"warning: {problem}; loading it because of --force", file=sys.stderr)
            how = "--force"
        else:
            how = reason
    db_path = install_snapshot(workspace, info)
    print(f"loaded snapshot {info.name} ({how}): {_counts(info)} -> {db_path}")
    if how not in (TIER_CONTENT, "same content"):
        _stale_note(workspace, info)
    return 0


def run_list(args: argparse.Namespace) -> int:
    snapshots = list_snapshots()
    if args.json:
        print(json.dumps([vars(info) for info in snapshots], indent=2, sort_keys=True))
        return 0
    if not snapshots:
        print("no snapshots (save one with 'torchtalk snapshot save NAME')")
        return 0
    width = max(len(info.name) for info in snapshots)
    for info in snapshots:
        print(
            f"{info.name:{width}}  {info.created_at}  {info.harness:16} "
            f"{info.git_commit or '-':12}  {_counts(info)}, {info.db_bytes / 1e6:.1f} MB"
        )
    return 0


def run_delete(args: argparse.Namespace) -> int:
    delete_snapshot(validate_name(args.name))
    print(f"deleted snapshot {args.name}")
    return 0


def run_diff(args: argparse.Namespace) -> int:
    for name in (args.a, args.b):
        read_info(validate_name(name))
    report = {"a": args.a, "b": args.b, **diff_databases(db_of(args.a), db_of(args.b))}
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
        return 0
    print(f"snapshot diff {args.a} -> {args.b}")
    print(
        f"files: {len(report['files_added'])} added, {len(report['files_modified'])} modified, "
        f"{len(report['files_removed'])} removed"
    )
    for label, key in (("+", "files_added"), ("~", "files_modified"), ("-", "files_removed")):
        for path in report[key][:20]:
            print(f"  {label} {path}")
        if len(report[key]) > 20:
            print(f"  {label} ... {len(report[key]) - 20} more")
    for section in ("nodes", "edges"):
        for change in ("added", "removed"):
            counts = report[section][change]
            listing = ", ".join(f"{kind} {n}" for kind, n in counts.items()) or "none"
            print(f"{section} {change}: {listing}")
    if not report["changed"]:
        print("no differences")
    return 0


def run_export(args: argparse.Namespace) -> int:
    path = export_snapshot(validate_name(args.name), Path(args.output) if args.output else None)
    print(f"exported snapshot {args.name} -> {path} ({path.stat().st_size / 1e6:.1f} MB)")
    return 0


def run_import(args: argparse.Namespace) -> int:
    if args.name is not None:
        validate_name(args.name)
    info = import_snapshot(Path(args.file), args.name, force=args.force)
    print(f"imported snapshot {info.name} ({info.harness}, commit {info.git_commit or '-'})")
    return 0
