"""`torchtalk audit`: measure the selection on the tree's own tests by breaking its code."""

from __future__ import annotations

import argparse
from pathlib import Path

from pytest_torchtalk.cli import add_source_arguments


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "audit",
        help="mutate one line at a time, build, run every test, and compare with the selection",
        description="In a clean git tree: apply seeded one-line mutations, rebuild with --build, "
        "run the whole suite with --test (pytest), select for the same diff, and report the "
        "failing test files the selection missed. Every mutated file is restored byte for byte.",
    )
    add_source_arguments(parser)
    parser.add_argument("--build", required=True, metavar="CMD", help="incremental build command")
    parser.add_argument(
        "--test", required=True, metavar="CMD", help="the pytest command of the suite"
    )
    parser.add_argument(
        "--mutations", type=int, default=20, metavar="N", help="mutations to plan (20)"
    )
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="random seed (0)")
    parser.add_argument(
        "--paths",
        nargs="+",
        default=[],
        metavar="GLOB",
        help="mutate only files matching these globs",
    )
    parser.add_argument(
        "--budget", type=float, metavar="MINUTES", help="start no mutation after this many minutes"
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
    from indexer.audit.report import markdown
    from indexer.audit.run import Audit, AuditOptions, tty_progress
    from indexer.errors import UsageError
    from indexer.workspace import Workspace

    if args.mutations < 1 or args.baseline_runs < 1:
        raise UsageError("--mutations and --baseline-runs must be at least 1")
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
    )
    audit = Audit(workspace, options, tty_progress)
    report = audit.run()
    text = markdown(report)
    print(text.split("\n| id |", 1)[0].rstrip())
    print(f"\nreport: {audit.report_path} (and {audit.report_path.with_suffix('.md')})")
    return 0
