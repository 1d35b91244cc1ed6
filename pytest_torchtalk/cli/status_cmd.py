"""`torchtalk status`: configuration, cache, and what the index holds."""

from __future__ import annotations

import argparse
import json

from indexer.errors import IndexMissingError
from indexer.locations import cache_dir, config_path
from indexer.query.health import shortfalls
from indexer.query.index import Index
from indexer.query.recorded import record_line, record_status
from indexer.query.status import index_status
from indexer.wording import age, plural
from indexer.workspace import Workspace
from pytest_torchtalk.cli import add_source_arguments


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("status", help="show configuration and index contents")
    add_source_arguments(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    workspace = Workspace.resolve(args.source, args.harness)
    report: dict = {
        "config": str(config_path()),
        "cache_dir": str(cache_dir()),
        "source": str(workspace.source),
        "source_from": workspace.source_from,
        "harness": workspace.harness,
        "harness_chosen_by": workspace.chosen_by,
        "manifests": list(workspace.manifest.origins),
        "db_path": str(workspace.db_path),
    }
    try:
        index = Index(workspace.db_path)
    except IndexMissingError:
        report["index"] = None
    else:
        report["index"] = index_status(index)
        report["index"]["below_expected_minimums"] = shortfalls(
            workspace.manifest, report["index"]["counts"]
        )
        index.close()
    report["record"] = record_status(workspace.db_path)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
        return 0 if report["index"] else 1
    _print_text(report)
    print(record_line(report["record"]))
    return 0 if report["index"] else 1


def _print_text(report: dict) -> None:
    given = report["source_from"] == "given"
    print(f"source:   {report['source']}{'' if given else ' (' + report['source_from'] + ')'}")
    print(f"harness:  {report['harness']} ({report['harness_chosen_by']})")
    print(f"config:   {report['config']}")
    print(f"cache:    {report['cache_dir']}")
    status = report["index"]
    if status is None:
        print(f"index:    none at {report['db_path']}; run 'torchtalk index build'")
        return
    seconds = status["age_seconds"]
    print(f"index:    {status['db_path']}")
    print(
        f"built:    {status['built_at']} ({age(seconds)} ago), commit {status['git_commit'] or '-'}"
    )
    print(
        f"files:    {status['files']} ({plural(status['files_with_parse_errors'], 'has', 'have')} "
        "parse errors)"
    )
    for section in ("nodes", "edges"):
        counts = status["counts"][section]
        listing = ", ".join(f"{kind} {count}" for kind, count in counts.items()) or "none"
        print(f"{section + ':':9} {listing}")
    print(f"unresolved refs: {status['counts']['unresolved_refs']}")
    print(
        "  uses of names defined nowhere in the tree (library calls, calls through templates,\n"
        "  macros or untyped receivers): they cost precision, not safety, as a change nothing\n"
        "  else reaches selects through them (docs/selection.md)"
    )
    if status["worst_parse_errors"]:
        print("most parse errors:")
        for row in status["worst_parse_errors"]:
            print(f"  {row['errors']:5}  {row['path']}")
    if status["file_problems"]:
        print(f"file problems ({len(status['file_problems'])}):")
        for row in status["file_problems"][:20]:
            print(f"  {row['path']}: {row['error']}")
    if status["tree_problems"]:
        print(f"not indexed ({len(status['tree_problems'])}):")
        for row in status["tree_problems"][:20]:
            print(f"  {row['path']}: {row['problem']}")
    unread = status.get("unread_registrations") or []
    if unread:  # registrations the index may lack (indexer/query/key_coverage.py)
        print(f"registration-block uses not read ({len(unread)}):")
        for use in unread[:20]:
            print(f"  {use['path']}:{use['line']} [{use['key']}] {use['use']}: {use['why']}")
    _print_precise(status.get("precise"))
    for line in status["below_expected_minimums"]:
        print(f"warning: below expected minimum: {line}")


def _print_precise(precise: dict | None) -> None:
    if precise is None:
        print("precise:  not run (an index built before precise C++ mode, or a partial one)")
        return
    if precise.get("mode") != "on":
        print(f"precise:  off: {precise.get('reason')}")
        return
    merge = precise.get("merge", {})
    print(
        f"precise:  on, {precise['database']}: {precise['tus']} TUs ({precise['failed']} failed,"
        f" {precise.get('cuda_left_to_fast', 0)} CUDA left to the fast graph); headers from"
        f" {precise.get('resource_dir_from')}"
    )
    print(
        f"          {merge.get('covered_functions', 0)} functions compiled; call edges:"
        f" {merge.get('edges', 0)} precise ({merge.get('confirmed', 0)} confirmed,"
        f" {merge.get('added', 0)} added), {merge.get('removed', 0)} name-matched removed,"
        f" {merge.get('ambiguities_resolved', 0)} ambiguities resolved"
    )
    if precise.get("database_note"):
        print(f"  note: {precise['database_note']}")
    for tu in precise.get("failed_tus", []):
        print(f"  failed TU {tu['file']}: {tu['reason']}")
    if precise.get("missing_files"):
        print(
            f"  the compile database names {precise['missing_files']} missing files, e.g. "
            + ", ".join(precise.get("missing_sample", []))
        )
