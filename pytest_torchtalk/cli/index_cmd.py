"""`torchtalk index build`: (re)build the index of a source tree."""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
from pathlib import Path

from indexer.build import build_index
from indexer.precise.summary import describe
from indexer.query.health import shortfalls
from indexer.workspace import Workspace
from pytest_torchtalk.cli import add_source_arguments


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("index", help="build or update the index")
    actions = parser.add_subparsers(dest="index_command", metavar="ACTION")
    actions.required = True
    build = actions.add_parser(
        "build", help="index the whole tree (atomically replaces the old index)"
    )
    add_source_arguments(build)
    build.add_argument(
        "--no-wait",
        action="store_true",
        help="fail at once if another build of this index is running",
    )
    build.add_argument(
        "--jobs", "-j", type=int, metavar="N", help="worker processes (default: cores)"
    )
    build.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    _add_compile_commands(build)
    build.set_defaults(handler=run_build)
    update = actions.add_parser(
        "update", help="re-index only what changed since the index (or a snapshot) was built"
    )
    add_source_arguments(update)
    update.add_argument(
        "--since", metavar="SNAPSHOT", help="start from this snapshot instead of the index"
    )
    update.add_argument(
        "--no-wait",
        action="store_true",
        help="fail at once if another build of this index is running",
    )
    update.add_argument(
        "--jobs", "-j", type=int, metavar="N", help="worker processes (default: cores)"
    )
    update.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    update.add_argument("--json", action="store_true", help="machine-readable result")
    _add_compile_commands(update)
    update.set_defaults(handler=run_update)


def _add_compile_commands(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--compile-commands",
        type=Path,
        metavar="PATH",
        help="compile_commands.json, or a build directory with one or a build.ninja, for "
        "precise C++ mode (default: found at the root or in the harness's build dirs)",
    )


def _print_precise(precise: dict | None) -> None:
    if not precise:
        return
    print(describe(precise))
    for tu in precise.get("failed_tus", []):
        print(
            f"warning: TU {tu['file']} failed, its files keep the fast graph: {tu['reason']}",
            file=sys.stderr,
        )
    if precise.get("database_note"):
        print(f"warning: {precise['database_note']}", file=sys.stderr)


def run_build(args: argparse.Namespace) -> int:
    workspace = Workspace.resolve(args.source, args.harness)
    result = build_index(
        workspace,
        jobs=args.jobs,
        wait=not args.no_wait,
        show_progress=False if args.quiet else None,
        compile_commands=args.compile_commands,
    )
    nodes = sum(result.counts["nodes"].values())
    edges = sum(result.counts["edges"].values())
    print(
        f"indexed {result.files} files of {workspace.source} ({workspace.harness}, "
        f"{workspace.chosen_by}): {nodes} nodes, {edges} edges in "
        f"{result.timings['total_s']:.1f}s -> {result.db_path}"
    )
    _print_precise(result.precise)
    if result.errors:
        print(
            f"warning: {result.errors} files had problems; see 'torchtalk status'", file=sys.stderr
        )
    for line in shortfalls(workspace.manifest, result.counts):
        print(f"warning: below {workspace.harness}'s expected minimum: {line}", file=sys.stderr)
    from indexer.select.engine import keep_hub_walk  # the selection engine, only here

    started = time.perf_counter()
    try:
        kept = keep_hub_walk(workspace)
    except (OSError, sqlite3.Error) as exc:  # the index is built: selections walk it then
        print(f"warning: not prepared for selections ({exc}); they will walk it", file=sys.stderr)
        return 0
    if kept:
        print(f"walked from the hub for selections: {kept} ({time.perf_counter() - started:.1f}s)")
    return 0


def run_update(args: argparse.Namespace) -> int:
    from indexer.update import update_index

    workspace = Workspace.resolve(args.source, args.harness)
    result = update_index(
        workspace,
        since=args.since,
        jobs=args.jobs,
        wait=not args.no_wait,
        show_progress=False if (args.quiet or args.json) else None,
        compile_commands=args.compile_commands,
    )
    for line in result.warnings:
        print(f"warning: {line}", file=sys.stderr)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2, sort_keys=True))
        return 0
    took = result.timings.get("total_s", 0.0)
    if result.full_build:
        print(f"full build ({result.reason}) in {took:.1f}s -> {result.db_path}")
    elif result.up_to_date:
        print(f"index is up to date ({took:.1f}s) -> {result.db_path}")
    else:
        print(
            f"updated from {result.base}: {len(result.modified)} modified, "
            f"{len(result.added)} added, {len(result.removed)} removed, "
            f"{len(result.dependents)} re-extracted for included changes; "
            f"{result.relinked_refs} refs re-linked in {took:.1f}s -> {result.db_path}"
        )
        _print_precise(result.precise)
    return 0
