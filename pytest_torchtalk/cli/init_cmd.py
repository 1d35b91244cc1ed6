"""`torchtalk init`: remember a source tree and its harness."""

from __future__ import annotations

import argparse
import sys

from indexer.harness import REPO_MANIFEST, load_harness, select_manifest
from indexer.locations import index_dir, load_config, require_source, save_config


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("init", help="remember a source tree (and its harness)")
    parser.add_argument(
        "--source", "--pytorch-source", dest="source", metavar="PATH", required=True
    )
    parser.add_argument("--harness", metavar="NAME", help="harness for this tree (default: detect)")
    parser.add_argument(
        "--set-default",
        action="store_true",
        help="make this the tree commands use when --source is omitted",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    source = require_source(args.source)
    if args.harness:
        load_harness(args.harness)  # fail now on an unknown name, not at the next build
    manifest, chosen_by = select_manifest(source, configured=args.harness)
    if args.harness and chosen_by == REPO_MANIFEST:
        print(
            f"torchtalk: note: {source / REPO_MANIFEST} is used instead of --harness "
            f"{args.harness} (a tree's own manifest outranks the configured one)",
            file=sys.stderr,
        )
    config = load_config()
    if args.harness:
        config.harnesses[str(source)] = args.harness
    if args.set_default or config.source is None:
        config.source = str(source)
        config.harness = args.harness
    path = save_config(config)
    print(f"source:  {source}")
    print(f"harness: {manifest.name} ({chosen_by})")
    print(f"index:   {index_dir(source, manifest.name)}")
    print(f"config:  {path}{' (default source)' if config.source == str(source) else ''}")
    return 0
