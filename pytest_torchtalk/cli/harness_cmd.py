"""`torchtalk harness verify`: check a harness against the known facts of a real tree.

Builds the index of the tree (or reuses an up-to-date one), then checks the harness's
integration anchors and minimums (indexer/anchors; docs/adding-a-framework.md): one line
per failure, exit 1 when any fails, 2 when the anchor file cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from indexer.errors import UsageError
from indexer.harness import builtin_manifest_dir
from indexer.wording import plural
from pytest_torchtalk.cli import add_source_arguments

# Where the project keeps each built-in harness's anchors (a checkout, not the wheel).
ANCHOR_DIR = builtin_manifest_dir().parent / "tests" / "integration"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("harness", help="check a harness against a real tree")
    actions = parser.add_subparsers(dest="harness_command", metavar="ACTION")
    actions.required = True
    verify = actions.add_parser(
        "verify",
        help="build or reuse the tree's index and check the harness's integration anchors "
        "and minimums; one line per failure, exit 1 when any fails",
    )
    add_source_arguments(verify)
    verify.add_argument(
        "--anchors",
        type=Path,
        metavar="FILE",
        help="the anchor file (default: tests/integration/<harness>.yml of this project)",
    )
    verify.add_argument(
        "--no-build",
        action="store_true",
        help="check the index as it is, even one built by other code or at another commit "
        "(said on stderr), instead of bringing it up to date first",
    )
    verify.add_argument(
        "--jobs", "-j", type=int, metavar="N", help="worker processes for a build (default: cores)"
    )
    verify.set_defaults(handler=run_verify)


def anchor_file(harness: str, given: Path | None) -> Path:
    if given is not None:
        return given
    path = ANCHOR_DIR / f"{harness}.yml"
    if not path.is_file():
        raise UsageError(
            f"no anchor file for harness {harness!r} at {path}; pass --anchors FILE "
            "(template: tests/integration/TEMPLATE.yml)"
        )
    return path


def run_verify(args: argparse.Namespace) -> int:
    from indexer.anchors.check import check
    from indexer.anchors.spec import read_anchors
    from indexer.query.index import Index
    from indexer.refresh import rebuild_reason, refresh_index
    from indexer.workspace import Workspace

    if not args.harness:
        raise UsageError("harness verify needs --harness NAME (the harness to check)")
    if args.source is None:
        raise UsageError("harness verify needs --source TREE (the real tree the anchors describe)")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1 (got {args.jobs})")
    anchors = read_anchors(anchor_file(args.harness, args.anchors))
    workspace = Workspace.resolve(args.source, args.harness)
    if anchors.harness != workspace.harness:
        raise UsageError(
            f"anchor file {anchors.path} is for harness {anchors.harness!r}, "
            f"not {workspace.harness!r}"
        )
    if args.no_build:
        reason = rebuild_reason(workspace) if workspace.db_path.is_file() else None
        if reason:
            print(f"torchtalk: note: checking the index as it is: {reason}", file=sys.stderr)
    else:
        done = refresh_index(workspace, jobs=args.jobs, show_progress=False)
        print(f"index of {workspace.source} ({workspace.harness}): {done.how}", file=sys.stderr)
    index = Index(workspace.db_path)  # IndexMissingError, one line, when --no-build finds none
    try:
        failures = check(index, anchors, workspace.manifest, workspace.source)
    finally:
        index.close()
    for line in failures:
        print(f"FAIL {line}")
    checks = (
        len(anchors.anchors)
        + len(anchors.minimums)
        + len(workspace.manifest.expected_minimums)
        + anchors.detected
    )
    what = (
        f"{plural(len(anchors.anchors), 'anchor')}, "
        f"{plural(len(anchors.minimums) + len(workspace.manifest.expected_minimums), 'minimum')}"
    )
    if failures:
        print(f"verify {workspace.harness}: {len(failures)} of {checks} checks failed ({what})")
        return 1
    print(f"verify {workspace.harness} on {workspace.source}: all {checks} checks hold ({what})")
    return 0
