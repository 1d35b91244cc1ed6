"""Hand-made load-breaking mutations of torchvision 0.21, measured on its whole test
directory (docs/audit.md, "torchvision 0.21: changes that stop the library loading").

The audit's plan never mutates a line with a string literal (a schema) and picks lines of
function bodies, so the class "a change that stops the extension's library from loading"
needs mutations made by hand. Each is applied through the audit's journal, built with the
tree's incremental build, selected with and without the record (the engine that `pytest
--torchtalk-affected` and `torchtalk audit` run: collection itself aborts on the mutated
tree, so the selection is read from the engine, not from a collect-only run), and the
whole test directory run (a suite that dies is run a file at a time, as the audit does).
Failing tests of a file that cannot import are its tests collected on the clean tree.

Usage, at the root of a built clean tree:
    python bench/torchvision/load_break.py --build CMD --record R.ttr --report OUT.json [--only ID]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from indexer.audit.compare import keeps, run_selection
from indexer.audit.journal import Journal
from indexer.audit.outcomes import COLLECTION, CRASH, Outcomes, run_command, run_suite
from indexer.durable import write_atomic
from indexer.query.index import Index
from indexer.refresh import refresh_index
from indexer.select.matching import ItemMatcher
from indexer.workspace import Workspace

TEST = "python -m pytest test -q --no-header -p no:cacheprovider"

# (id, class, path, line, old, new): one line each, the line as in 0.21.0.
MUTATIONS = [
    (
        "L1",
        "schema in TORCH_LIBRARY_FRAGMENT m.def: nms's float argument made int",
        "torchvision/csrc/ops/nms.cpp",
        24,
        '      "torchvision::nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"));',
        '      "torchvision::nms(Tensor dets, Tensor scores, int iou_threshold) -> Tensor"));',
    ),
    (
        "L2",
        "registration in TORCH_LIBRARY_IMPL(torchvision, CPU): roi_align given the backward "
        "kernel (no string changed; its inferred schema does not match the def)",
        "torchvision/csrc/ops/cpu/roi_align_kernel.cpp",
        393,
        "      TORCH_FN(roi_align_forward_kernel));",
        "      TORCH_FN(roi_align_backward_kernel));",
    ),
    (
        "L3",
        "static initializer (torch::RegisterOperators() of image.so): decode_png's schema "
        "given decode_webp's function",
        "torchvision/csrc/io/image/image.cpp",
        20,
        "            &decode_png)",
        "            &decode_webp)",
    ),
]


def collected(source: Path) -> dict[str, list[str]]:
    """Test ids per test file, collected on the clean tree (a file that cannot be
    collected there is left out: it fails without any mutation)."""
    run = subprocess.run(
        [*TEST.split(), "--collect-only", "--continue-on-collection-errors"],
        cwd=source,
        capture_output=True,
        text=True,
    )
    per_file: dict[str, list[str]] = defaultdict(list)
    for line in run.stdout.splitlines():
        if "::" in line and not line.startswith(" "):
            per_file[line.split("::", 1)[0]].append(line.strip())
    return dict(per_file)


def failing_tests(outcomes: Outcomes, per_file: dict[str, list[str]]) -> set[str]:
    """The tests that failed: a file that crashed or did not import fails all of its
    collected tests (none of them could run)."""
    failing = set()
    for test in outcomes.failing():
        path, _, rest = test.partition("::")
        if rest in (COLLECTION, CRASH):
            failing.update(per_file.get(path, [test]))
        else:
            failing.add(test)
    return failing


def judge(selection, failing: set[str], per_file: dict[str, list[str]]) -> dict:
    """The selection against the failures, over the files the clean tree collects; a file
    failing that has no test on the clean tree (a collection error there, ignored by
    pytest.ini, no tests) is excluded as the audit excludes a baseline failure, and listed
    with whether the selection names it."""
    matcher = ItemMatcher(selection)
    all_tests = [test for tests in per_file.values() for test in tests]
    kept = {test for test in all_tests if keeps(matcher, test)}
    failing_files = {test.split("::", 1)[0] for test in failing}
    excluded = sorted(failing_files - set(per_file))
    failing_files &= set(per_file)
    failing = {test for test in failing if test.split("::", 1)[0] in per_file}
    if selection.run_everything:
        selected_files = set(per_file)
    else:
        selected_files = {test.split("::", 1)[0] for test in kept}
    named = set(selection.files)
    return {
        "run_everything": list(selection.everything),
        "selected_files": len(selected_files),
        "failing_files": len(failing_files),
        "missed_files": sorted(failing_files - selected_files),
        "tests_kept": len(kept),
        "failing_tests": len(failing),
        "missed_tests": len(failing - kept),
        "missed_test_examples": sorted(failing - kept)[:5],
        "excluded_failing_files": [
            f"{path} ({'selected' if selection.run_everything or path in named else 'not selected'})"
            for path in excluded
        ],
        "reasons": sorted(
            {reason.note or reason.entity for f in selection.files.values() for reason in f.reasons}
        )[:5],
        "entities": [entity.label for entity in selection.entities][:10],
    }


def rejudge(
    source: Path, workspace: Workspace, journal: Journal, report: dict, record: Path
) -> None:
    """The selections of a finished report again (no build, no suite): each mutation
    applied, selected with and without the record, judged against the failures the report
    holds, restored."""
    per_file = collected(source)
    for result in report["results"]:
        if result.get("status") != "caught":
            continue
        target = source / result["path"]
        lines = target.read_bytes().decode().split("\n")
        lines[result["line"] - 1] = result["new"]
        journal.change(result["path"], "\n".join(lines).encode(), result["id"])
        try:
            failing = set()
            for path in result["failing_file_list"]:
                failing.update(per_file.get(path, [f"{path}::{CRASH}"]))
            for mode, with_record in (("record", record), ("static", None)):
                result[mode] = judge(run_selection(workspace, with_record), failing, per_file)
        finally:
            for entry in journal.pending():
                journal.restore(entry)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", required=True)
    parser.add_argument("--record", type=Path, required=True)
    parser.add_argument("--report", type=Path, required=True)
    parser.add_argument("--only", action="append", default=[])
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument(
        "--rejudge", action="store_true", help="select again for the report's mutations"
    )
    args = parser.parse_args()
    source = Path.cwd().resolve()
    workspace = Workspace.resolve(source, "torchvision")
    journal = Journal(source / ".git" / "torchtalk-load-break", source)
    for entry in journal.restore_all():
        print(f"restored {entry.path}", flush=True)
    if subprocess.run(
        ["git", "status", "--porcelain"], cwd=source, capture_output=True, text=True
    ).stdout.strip():
        print("the tree is not clean", file=sys.stderr)
        return 2
    refresh_index(workspace, show_progress=False)
    if args.rejudge:
        report = json.loads(args.report.read_text())
        rejudge(source, workspace, journal, report, args.record)
        refresh_index(workspace, show_progress=False)
        write_atomic(args.report, (json.dumps(report, indent=1, default=str) + "\n").encode())
        return 0
    index = Index(workspace.db_path)
    test_files = sorted(index.test_file_paths().values())
    index.close()
    started = time.monotonic()
    per_file = collected(source)
    report = {
        "source": str(source),
        "test": TEST,
        "record": str(args.record),
        "collected_files": len(per_file),
        "collected_tests": sum(map(len, per_file.values())),
        "collect_seconds": round(time.monotonic() - started, 1),
        "results": [],
    }
    print(f"collected {report['collected_tests']} tests in {len(per_file)} files", flush=True)
    for ident, kind, path, line, old, new in MUTATIONS:
        if args.only and ident not in args.only:
            continue
        target = source / path
        data = target.read_bytes()
        lines = data.decode().split("\n")
        if lines[line - 1] != old:
            raise SystemExit(f"{path}:{line} is {lines[line - 1]!r}, not {old!r}")
        lines[line - 1] = new
        result = {"id": ident, "class": kind, "path": path, "line": line, "old": old, "new": new}
        journal.change(path, "\n".join(lines).encode(), ident)
        try:
            built = run_command(args.build, source)
            result["build_seconds"] = round(built.seconds, 1)
            if not built.ok:
                result["status"] = "not building"
                result["build_output"] = built.tail
                continue
            for mode, record in (("record", args.record), ("static", None)):
                began = time.monotonic()
                selection = run_selection(workspace, record)
                result[mode] = {"selection_seconds": round(time.monotonic() - began, 1)}
                result[mode]["_selection"] = selection
            began = time.monotonic()
            outcomes = run_suite(TEST, source, test_files, args.timeout)
            result["suite_seconds"] = round(time.monotonic() - began, 1)
            result["per_file"] = outcomes.per_file
            failing = failing_tests(outcomes, per_file)
            result["failing_file_list"] = sorted({t.split("::", 1)[0] for t in failing})
            result["not_failing_files"] = sorted(set(per_file) - set(result["failing_file_list"]))
            result["crash_tail"] = (outcomes.command.tail if outcomes.command else "")[-600:]
            for mode in ("record", "static"):
                selection = result[mode].pop("_selection")
                result[mode].update(judge(selection, failing, per_file))
            result["status"] = "caught" if failing else "uncaught"
        finally:
            for entry in journal.pending():
                journal.restore(entry)
            report["results"].append(result)
            write_atomic(args.report, (json.dumps(report, indent=1, default=str) + "\n").encode())
        print(
            json.dumps({k: v for k, v in result.items() if k not in ("crash_tail",)}, default=str)[
                :3000
            ],
            flush=True,
        )
    rebuilt = run_command(args.build, source)
    report["final_build_ok"] = rebuilt.ok
    refresh_index(workspace, show_progress=False)
    write_atomic(args.report, (json.dumps(report, indent=1, default=str) + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
