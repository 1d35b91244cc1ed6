"""`torchtalk record ...`: finalize a stopped run's journals, merge records of CI shards,
show what tests executed, stats."""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
from pathlib import Path

from indexer import durable
from indexer.errors import UsageError
from indexer.query.recorded import RecordedRuns, record_path_for
from indexer.record import journal, storage
from indexer.record.merge import merge
from indexer.record.model import Record
from indexer.workspace import Workspace
from pytest_torchtalk.cli import add_source_arguments


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "record", help="recorded runs: merge shards, show what tests executed, stats"
    )
    actions = parser.add_subparsers(dest="record_command", metavar="ACTION")
    actions.required = True

    finalizing = actions.add_parser(
        "finalize", help="make the record of a run that stopped before its end, from its journals"
    )
    finalizing.add_argument(
        "journals", nargs="*", metavar="JOURNAL", type=Path,
        help="journal files or directories (default: the journals of the record beside "
        "the index, <record>.journal/)",
    )  # fmt: skip
    finalizing.add_argument(
        "-o", "--output", type=Path, metavar="OUT",
        help="the record to write (default: the record the journal directory belongs to)",
    )  # fmt: skip
    add_source_arguments(finalizing)
    finalizing.set_defaults(handler=run_finalize)

    merging = actions.add_parser(
        "merge", help="merge records (CI shards, journals of stopped runs) into one"
    )
    merging.add_argument("inputs", nargs="+", metavar="RECORD", type=Path)
    merging.add_argument("-o", "--output", required=True, type=Path, metavar="OUT")
    merging.add_argument(
        "--allow-mixed-commits",
        action="store_true",
        help="merge records made at different commits (the result names no commit)",
    )
    merging.set_defaults(handler=run_merge)

    show = actions.add_parser("show", help="what a test executed, or which tests executed X")
    _record_arguments(show)
    which = show.add_mutually_exclusive_group(required=True)
    which.add_argument("--test", metavar="NODEID", help="what this test executed")
    which.add_argument("--op", metavar="NAME", help="tests that executed this op (aten::mm)")
    which.add_argument(
        "--function", metavar="QUALNAME", help="tests that entered this Python function"
    )
    show.set_defaults(handler=run_show)

    stats = actions.add_parser("stats", help="what the record holds")
    _record_arguments(stats)
    stats.set_defaults(handler=run_stats)


def _record_arguments(parser: argparse.ArgumentParser) -> None:
    add_source_arguments(parser)
    parser.add_argument(
        "--record", type=Path, metavar="PATH", help="record file (default: beside the index)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _open(args: argparse.Namespace) -> RecordedRuns:
    path = args.record
    if path is None:
        path = record_path_for(Workspace.resolve(args.source, args.harness).db_path)
    return RecordedRuns.open(path)


def _refuse_output(path: Path) -> None:
    problem = durable.write_problem(path)  # a symlink, FIFO, device or directory
    if problem:
        raise UsageError(f"--output {path}: {problem}")
    if (path.exists() or path.is_symlink()) and not (path.is_file() and journal.is_record(path)):
        raise UsageError(f"{path} exists and is not a TorchTalk record: not overwriting it")


def _read_input(path: Path) -> Record:
    """A record, a journal, or a journal directory (its journals finalized as one)."""
    if path.is_dir():
        return journal.finalize(_journals_of(path))
    if journal.is_journal(path):
        return journal.finalize([path])
    return storage.read(path)


def _journals_of(directory: Path) -> list[Path]:
    found = journal.journals_in(directory)
    if not found:
        raise UsageError(f"no journal ({journal.SUFFIX}) in {directory}")
    return found


def run_merge(args: argparse.Namespace) -> int:
    _refuse_output(args.output)  # before the shards are read
    records = [_read_input(path) for path in args.inputs]
    merged = merge(records, allow_mixed_commits=args.allow_mixed_commits)
    storage.write(merged, args.output)
    print(
        f"merged {len(records)} records: {len(merged.tests)} tests, "
        f"{len(merged.names)} names -> {args.output}"
    )
    return 0


def run_finalize(args: argparse.Namespace) -> int:
    given = args.journals
    if not given:
        record = record_path_for(Workspace.resolve(args.source, args.harness).db_path)
        given = [journal.journal_dir(record)]
    paths: list[Path] = []
    for path in given:
        if path.is_dir():
            paths.extend(_journals_of(path))
        elif not path.exists():
            raise UsageError(f"no journal at {path}")
        elif not journal.is_journal(path):
            raise UsageError(f"{path} is not a TorchTalk journal")
        else:
            paths.append(path)
    output = args.output or _record_of(given)
    _refuse_output(output)
    for path in paths:
        pid = journal.running_pid(path)
        if pid is not None:
            raise UsageError(f"{path} is still being written by a running test run (pid {pid})")
    record = journal.finalize(paths)
    storage.write(record, output)
    for path in paths:  # in the record now
        path.unlink(missing_ok=True)
    for directory in {p.parent for p in paths}:
        with contextlib.suppress(OSError):
            directory.rmdir()
    reasons = record.meta.get("partial_reasons") or []
    print(
        f"finalized {_count(len(paths), 'journal')}: {_count(len(record.tests), 'test')} "
        f"-> {output}" + (f" (partial: {'; '.join(reasons)})" if reasons else "")
    )
    return 0


def _record_of(given: list[Path]) -> Path:
    """The record journals belong to: ``<record>.journal/`` names it."""
    owners = {journal.record_path_of(path if path.is_dir() else path.parent) for path in given}
    if len(owners) != 1 or None in owners:
        raise UsageError("name the record to write with --output")
    return owners.pop()  # type: ignore[return-value]


def run_show(args: argparse.Namespace) -> int:
    runs = _open(args)
    if args.test:
        test = runs.test(args.test)
        if test is None:
            raise UsageError(f"no test {args.test!r} in the record {runs.path}")
        names = runs.names_of(test)
        result = {
            "nodeid": test.nodeid, "outcome": test.outcome, "duration": test.duration,
            "unrecorded": test.unrecorded, "executed": names,
        }  # fmt: skip
        if args.json:
            print(json.dumps(result, indent=2))
            return 0
        print(f"{test.nodeid}: {test.outcome}, {test.duration:.2f} s")
        if test.unrecorded:
            print(f"  unrecorded: {test.unrecorded}")
        for kind, texts in names.items():
            print(f"  {kind} ({len(texts)}):")
            for text in texts:
                print(f"    {text}")
        return 0
    kind, pattern = ("op", args.op) if args.op else ("function", args.function)
    names = runs.matching_names(kind, pattern)
    hits = runs.tests_executing(names)
    tests = sorted(runs.record.tests[t].nodeid for t in hits)
    modules = sorted(runs.import_work(names))  # run while imported: no one test's work
    if args.json:
        found = {"names": [t for _, t in names], "tests": tests, "run_at_import_of": modules}
        print(json.dumps(found, indent=2))
        return 0
    if not names:
        print(f"no test in the record {runs.path} executed {kind} {pattern!r}")
        return 1
    files = {nodeid.split("::", 1)[0] for nodeid in tests}
    print(
        f"{kind} {', '.join(t for _, t in names)}: executed by {_count(len(tests), 'test')} "
        f"in {_count(len(files), 'file')}"
    )
    if modules:
        importers = runs.importers(modules)
        print(
            f"  and while importing {', '.join(modules)}: "
            f"{_count(len(importers), 'test')} import {'it' if len(modules) == 1 else 'them'}"
        )
    for nodeid in tests:
        print(f"  {nodeid}")
    return 0


def run_stats(args: argparse.Namespace) -> int:
    runs = _open(args)
    summary = runs.summary()
    meta = runs.record.meta
    summary["dirty"] = meta.get("dirty")  # whose record: the commit and uncommitted files
    summary["partial"] = bool(meta.get("partial"))
    summary["partial_reasons"] = list(meta.get("partial_reasons") or [])
    ops = runs.per_test_counts("op")
    summary["ops_per_test"] = {
        "median": statistics.median(ops) if ops else 0, "max": max(ops, default=0),
    }  # fmt: skip
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
        return 0
    print(f"record:   {summary['path']} ({summary['bytes']} bytes)")
    print(f"commit:   {summary['commit'] or '-'}, made {summary['created_at']}")
    dirty = summary["dirty"]
    if dirty is None:
        print("tree:     unknown: the record does not say whether it was clean")
    elif dirty:
        print(f"tree:     dirty, {_count(len(dirty), 'file')} differ from the commit:")
        for path, digest in dirty.items():
            print(f"            {path} {digest or '(deleted)'}")
    else:
        print("tree:     clean at the commit")
    if summary["partial"]:
        print(f"partial:  {'; '.join(summary['partial_reasons']) or 'yes'}")
    print(
        f"tests:    {summary['tests']} in {_count(summary['test_files'], 'file')}; "
        f"{summary['complete_tests']} complete, {summary['unrecorded_tests']} unrecorded"
    )
    print("outcomes: " + ", ".join(f"{k} {v}" for k, v in summary["outcomes"].items()))
    print("names:    " + ", ".join(f"{k} {v}" for k, v in summary["names"].items()))
    print(
        f"ops per test: median {summary['ops_per_test']['median']}, "
        f"max {summary['ops_per_test']['max']}"
    )
    used = ", ".join(f"{d} {n}" for d, n in sorted(summary["tests_by_device"].items()))
    print(
        f"devices:  {', '.join(summary['devices']) or '-'} present; tests using each: "
        f"{used or 'none'} ({summary['device_types']})"
    )
    print(f"kernels:  {summary['cuda_kernels']}")
    for problem in summary["problems"]:
        print(f"problem:  {problem}")
    return 0


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"
