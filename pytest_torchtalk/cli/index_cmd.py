"""`torchtalk index build`: (re)build the index of a source tree."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from indexer.errors import UsageError
from indexer.precise.summary import describe
from indexer.query.health import shortfalls
from indexer.wording import plural
from indexer.workspace import Workspace
from pytest_torchtalk.cli import add_source_arguments


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("index", help="build or update the index")
    actions = parser.add_subparsers(dest="index_command", metavar="ACTION")
    actions.required = True
    build = actions.add_parser(
        "build",
        help="bring the index up to date: nothing if it is, an update if one can, else a "
        "full build (atomic: readers keep the old index until the new one is complete)",
    )
    add_source_arguments(build)
    build.add_argument(
        "--force",
        action="store_true",
        help="build the whole index again even if it is up to date, and replace it even when "
        "files it holds could not be read (an unreadable directory)",
    )
    build.add_argument(
        "--no-wait",
        action="store_true",
        help="fail at once if another build of this index is running",
    )
    build.add_argument(
        "--jobs", "-j", type=int, metavar="N", help="worker processes (default: cores)"
    )
    build.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    build.add_argument(
        "--verbose", "-v", action="store_true", help="say what preparing for selections did"
    )
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
    update.add_argument(
        "--force",
        action="store_true",
        help="replace the index even when files it holds could not be read (an unreadable "
        "directory)",
    )
    update.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    update.add_argument("--json", action="store_true", help="machine-readable result")
    _add_compile_commands(update)
    update.set_defaults(handler=run_update)


def _check_arguments(args: argparse.Namespace) -> None:
    """Refuse what would fail only after the extraction's minutes."""
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1 (got {args.jobs})")
    if args.compile_commands is not None and not args.compile_commands.exists():
        raise UsageError(f"--compile-commands {args.compile_commands}: no such file or directory")


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
    from indexer.refresh import refresh_index

    _check_arguments(args)
    workspace = Workspace.resolve(args.source, args.harness)
    done = refresh_index(
        workspace,
        force=args.force,
        jobs=args.jobs,
        wait=not args.no_wait,
        show_progress=False if args.quiet else None,
        compile_commands=args.compile_commands,
    )
    if done.how == "up to date":
        took = done.updated.timings.get("total_s", 0.0) if done.updated else 0.0
        print(
            f"index of {workspace.source} is up to date: nothing to do ({took:.1f}s; "
            f"--force builds it again) -> {workspace.db_path}"
        )
    elif done.how == "updated" and done.updated is not None:
        print(f"updated incrementally: {update_summary(done.updated)}")
        _print_precise(done.updated.precise)
        _warn_updated(done.updated)
    elif done.built is not None:
        result = done.built
        nodes = sum(result.counts["nodes"].values())
        edges = sum(result.counts["edges"].values())
        print(
            f"built ({done.reason}): {plural(result.files, 'file')} of {workspace.source} "
            f"({workspace.harness}, {workspace.chosen_by}), {plural(nodes, 'node')}, "
            f"{plural(edges, 'edge')} in {result.timings['total_s']:.1f}s -> {result.db_path}"
        )
        _print_precise(result.precise)
        if result.errors:
            print(
                f"warning: {plural(result.errors, 'file')} had problems; see 'torchtalk status'",
                file=sys.stderr,
            )
        for problem in result.problems:
            print(f"warning: not indexed: {problem.path}: {problem.problem}", file=sys.stderr)
        for line in shortfalls(workspace.manifest, result.counts):
            print(f"warning: below {workspace.harness}'s expected minimum: {line}", file=sys.stderr)
        _warn_unread(result.db_path)
    else:
        print(f"built ({done.reason}) -> {workspace.db_path}")
    _print_prepared(done, args.verbose)
    return 0


def _warn_unread(db_path: Path) -> None:
    """Uses in registration blocks the build could not read: said, never a silent gap."""
    from indexer.query.index import Index
    from indexer.query.key_coverage import unread_uses

    index = Index(db_path)
    try:
        unread = unread_uses(index)
    finally:
        index.close()
    if unread:
        first = unread[0]
        print(
            f"warning: {plural(len(unread), 'use')} in registration blocks not read (first: "
            f"{first['path']}:{first['line']} {first['use']}: {first['why']}); see 'torchtalk status'",
            file=sys.stderr,
        )


def _print_prepared(done, verbose: bool) -> None:
    """What preparing for selections did (``indexer.select.derived``), when it was needed;
    a failure leaves the index standing and selections to walk what is missing."""
    if done.prepare_problem:
        print(
            f"warning: not prepared for test selection ({done.prepare_problem}); "
            "selections will walk what is missing",
            file=sys.stderr,
        )
    elif done.prepared:
        print(f"prepared for test selection in {done.prepare_s:.1f}s")
        if verbose:
            print(f"  walked from the root package: {done.prepared}")


def update_summary(result) -> str:
    """What an update did, in one line."""
    took = result.timings.get("total_s", 0.0)
    parts = [
        f"{len(result.modified)} modified",
        f"{len(result.added)} added",
        f"{len(result.removed)} removed",
    ]
    if result.dependents:
        parts.append(f"{len(result.dependents)} re-extracted because a header they include changed")
    return (
        f"{', '.join(parts)} since the {result.base}; {plural(result.relinked_refs, 'ref')} "
        f"re-linked in {took:.1f}s -> {result.db_path}"
    )


def _warn_updated(result) -> None:
    for line in result.warnings:
        print(f"warning: {line}", file=sys.stderr)


def run_update(args: argparse.Namespace) -> int:
    from indexer.refresh import Preparation, Refresh, prepare_for_selection
    from indexer.update import update_index

    _check_arguments(args)
    workspace = Workspace.resolve(args.source, args.harness)
    preparation = Preparation(workspace)
    result = update_index(
        workspace,
        since=args.since,
        jobs=args.jobs,
        wait=not args.no_wait,
        show_progress=False if (args.quiet or args.json) else None,
        force=args.force,
        compile_commands=args.compile_commands,
        derive=preparation,
    )
    _warn_updated(result)
    done = Refresh("built" if result.full_build else "updated", result.reason, None, result)
    if result.up_to_date:
        prepare_for_selection(workspace, done, wait=not args.no_wait)
    else:
        preparation.installed(workspace.db_path, done)
    if done.prepare_problem:
        print(f"warning: not prepared for test selection ({done.prepare_problem})", file=sys.stderr)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2, sort_keys=True))
        return 0
    took = result.timings.get("total_s", 0.0)
    if result.full_build:
        print(f"full build ({result.reason}) in {took:.1f}s -> {result.db_path}")
    elif result.up_to_date:
        print(f"index is up to date ({took:.1f}s) -> {result.db_path}")
    else:
        print(f"updated: {update_summary(result)}")
        _print_precise(result.precise)
    return 0
