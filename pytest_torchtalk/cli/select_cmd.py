"""`torchtalk select`: the tests a change can break, without running them (for CI matrices)."""

from __future__ import annotations

import argparse
import json
import sys

from pytest_torchtalk.cli import add_source_arguments


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "select", help="list the test files (and tests) a git diff can break, with reasons"
    )
    add_source_arguments(parser)
    parser.add_argument(
        "--base",
        metavar="REV",
        help="diff against the merge-base with REV (default: origin/HEAD, then main, then master)",
    )
    parser.add_argument("--json", action="store_true", help="the JSON report (docs/selection.md)")
    parser.add_argument(
        "--tests",
        action="store_true",
        help="with --json: name every test the record decides and selects, not only those "
        "of the files it narrows",
    )
    parser.add_argument(
        "--no-update",
        action="store_true",
        help="never update a stale index first (a stale index then selects everything)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    # Imported here: every torchtalk command builds the parser, only this one selects.
    from indexer.select_changes import select_changes
    from indexer.workspace import Workspace
    from pytest_torchtalk.report import selection_to_dict, summary_lines

    workspace = Workspace.resolve(args.source, args.harness)
    selection = select_changes(workspace, args.base, update=not args.no_update)
    if args.json:
        # Indented for a person at a terminal; compact for the programs it is piped to (a
        # central change's report is ~3 MB indented, ~2 MB not, and quicker to write).
        report = selection_to_dict(selection, tests=args.tests)
        # A tree of fresh dicts and lists: no cycle to look for in its ~100,000 objects.
        if sys.stdout.isatty():
            print(json.dumps(report, indent=2, check_circular=False))
        else:
            print(json.dumps(report, separators=(",", ":"), check_circular=False))
        return 0
    for line in summary_lines(selection, limit=10, detail=True):
        print(line)
    return 0
