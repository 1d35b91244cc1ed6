"""`torchtalk audit`: measure the selection on the tree's own tests by breaking its code."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_torchtalk.cli import add_source_arguments

if TYPE_CHECKING:
    from indexer.workspace import Workspace


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "audit",
        help="mutate one line at a time, build, run every test, and compare with the selection",
        description="In a clean git tree: apply seeded one-line mutations, rebuild with --build, "
        "run the whole suite with --test (pytest), select for the same diff, and report the "
        "failing test files the selection missed. Every mutated file is restored byte for byte.",
    )
    add_source_arguments(parser)
    parser.add_argument("--build", metavar="CMD", help="incremental build command")
    parser.add_argument("--test", metavar="CMD", help="the pytest command of the suite")
    parser.add_argument(
        "--replay",
        type=Path,
        metavar="REPORT",
        help="run only the selection again for each built mutation of REPORT (same HEAD), "
        "against the failures it recorded; no --build or --test",
    )
    precise = parser.add_mutually_exclusive_group()
    precise.add_argument(
        "--precise",
        action="store_true",
        help="with --replay: select over an index with precise C++ mode (a compile database "
        "must be found, or named with --compile-commands)",
    )
    precise.add_argument(
        "--no-precise",
        action="store_true",
        help="with --replay: select over the fast graph alone (TORCHTALK_PRECISE=off)",
    )
    parser.add_argument(
        "--no-record",
        action="store_true",
        help="with --replay: select with the static index alone, not with the report's record",
    )
    parser.add_argument(
        "--compile-commands",
        type=Path,
        metavar="PATH",
        help="with --precise: compile_commands.json, or a build directory with one or a "
        "build.ninja",
    )
    parser.add_argument(
        "--mutations", type=int, default=20, metavar="N", help="mutations to plan (20)"
    )
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="random seed (0)")
    parser.add_argument(
        "--paths",
        nargs="+",
        default=[],
        metavar="GLOB[:LINES]",
        help="mutate only files matching these globs; GLOB:FIRST-LAST (or GLOB:LINE) only "
        "those lines of them",
    )
    parser.add_argument(
        "--budget",
        type=float,
        metavar="MINUTES",
        help="stop after this many minutes: no mutation starts after it, and no build or "
        "test run (the baseline's included) runs past it",
    )
    parser.add_argument(
        "--run-limit",
        type=float,
        metavar="MINUTES",
        help="kill a mutation's test run after this many minutes (default: 10 times the "
        "baseline's suite, at least 10); the baseline's runs are bounded by --budget",
    )
    parser.add_argument(
        "--resume", action="store_true", help="go on from the report of an interrupted run"
    )
    parser.add_argument(
        "--report",
        type=Path,
        metavar="PATH",
        help="JSON report (and PATH with .md); default .git/torchtalk-audit/report.json",
    )
    parser.add_argument(
        "--record",
        type=Path,
        metavar="PATH",
        help="select with this recorded run besides the index",
    )
    parser.add_argument(
        "--baseline-runs",
        type=int,
        default=2,
        metavar="N",
        help="runs of the unmutated suite; a test failing or changing in any is excluded (2)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from indexer.audit.mutation import path_filter
    from indexer.audit.report import markdown
    from indexer.audit.run import Audit, AuditOptions, tty_progress
    from indexer.errors import UsageError
    from indexer.workspace import Workspace

    if args.replay is not None:
        return _replay(args)
    if not args.build or not args.test:
        raise UsageError("--build and --test are required (or --replay REPORT)")
    if args.precise or args.no_precise or args.compile_commands or args.no_record:
        raise UsageError(
            "--precise, --no-precise, --compile-commands and --no-record go with --replay"
        )
    if args.mutations < 1 or args.baseline_runs < 1:
        raise UsageError("--mutations and --baseline-runs must be at least 1")
    for flag, value in (("--budget", args.budget), ("--run-limit", args.run_limit)):
        if value is not None and not value > 0:  # also refuses nan
            raise UsageError(f"{flag} must be a positive number of minutes (got {value})")
    path_filter(args.paths)  # a malformed line range, before the baseline's suite runs
    workspace = Workspace.resolve(args.source or ".", args.harness)
    options = AuditOptions(
        build=args.build,
        test=args.test,
        mutations=args.mutations,
        seed=args.seed,
        paths=args.paths,
        budget_minutes=args.budget,
        resume=args.resume,
        report=args.report.resolve() if args.report else None,
        record=args.record,
        baseline_runs=args.baseline_runs,
        run_limit_minutes=args.run_limit,
    )
    audit = Audit(workspace, options, tty_progress)
    report = audit.run()
    text = markdown(report)
    print(text.split("\n| id |", 1)[0].rstrip())
    print(f"\nreport: {audit.report_path} (and {audit.report_path.with_suffix('.md')})")
    return 0


def _replay(args: argparse.Namespace) -> int:
    import os

    from indexer.audit.replay import Replay
    from indexer.audit.report import markdown
    from indexer.audit.run import tty_progress
    from indexer.errors import UsageError
    from indexer.precise.layer import SWITCH
    from indexer.workspace import Workspace

    if args.build or args.test or args.resume or args.record:
        raise UsageError("--replay takes its --build, --test and --record from the report")
    if args.compile_commands and not args.precise:
        raise UsageError("--compile-commands goes with --precise")
    workspace = Workspace.resolve(args.source or ".", args.harness)
    previous = os.environ.get(SWITCH)
    if args.no_precise:
        os.environ[SWITCH] = "off"  # for the selections' index updates too
    try:
        if args.precise or args.no_precise:
            _index_in_mode(workspace, "on" if args.precise else "off", args.compile_commands)
        replay = Replay(
            workspace, args.replay, args.report, tty_progress, use_record=not args.no_record
        )
        report = replay.run()
    finally:
        if previous is None:
            os.environ.pop(SWITCH, None)
        else:
            os.environ[SWITCH] = previous
    print(markdown(report).split("\n| id |", 1)[0].rstrip())
    print(f"\nreport: {replay.report_path} (and {replay.report_path.with_suffix('.md')})")
    return 0


def _index_in_mode(workspace: Workspace, wanted: str, compile_commands: Path | None) -> None:
    """Build the index again when its precise mode is not ``wanted`` (or a compile
    database is named); a UsageError when precise mode cannot be what is asked."""
    from indexer.audit.replay import precise_mode
    from indexer.audit.run import tty_progress
    from indexer.build import build_index
    from indexer.errors import UsageError

    if precise_mode(workspace).get("mode") != wanted or compile_commands:
        tty_progress(f"building the index with precise mode {wanted}")
        named = compile_commands.resolve() if compile_commands else None
        build_index(workspace, show_progress=False, compile_commands=named)
    found = precise_mode(workspace)
    if found.get("mode") != wanted:
        raise UsageError(f"precise mode is {found.get('mode')}: {found.get('reason', '')}")
