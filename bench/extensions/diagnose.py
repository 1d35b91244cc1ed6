"""Why an audit's selection kept what it kept: each built mutation of a report re-applied
to a clean copy of the audited tree, selected again (with the report's record), and the
reasons printed per listed test file, with how many of its tests run.

    python bench/extensions/diagnose.py REPORT [MUTATION_ID ...] [--source TREE]

TREE (default: the current directory) must be at the report's HEAD and clean; every file
is restored byte for byte through the audit's journal, as ``torchtalk audit --replay``
does. Without ids: the mutations that miss a failing test, run everything, or keep more
test files than fail. The output quotes the tree's code paths and qualnames: keep it out
of the repository when the tree is a corpus.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from indexer.audit.compare import compare, run_selection
from indexer.audit.mutation import Mutation, rewrite
from indexer.audit.outcomes import Outcomes
from indexer.audit.replay import MUTATION_FIELDS
from indexer.audit.run import Audit, AuditOptions
from indexer.select.matching import ItemMatcher
from indexer.select.model import Selection
from indexer.workspace import Workspace


def interesting(result: dict) -> bool:
    """A miss, a run-everything, or more test files kept than fail."""
    if result["status"] not in ("caught", "uncaught"):
        return False
    return bool(
        result.get("missed_tests")
        or result.get("run_everything")
        or len(result.get("selected_files", [])) > max(1, len(result.get("failing_files", [])))
    )


def describe(selection: Selection, baseline: Outcomes, failing: set[str]) -> list[str]:
    """One block per listed test file: kept / all tests, failing, and each reason's chain."""
    lines = [f"  entities: {[e.label + ' @' + e.evidence for e in selection.entities]}"]
    if selection.everything:
        lines.append(f"  RUN EVERYTHING: {selection.everything}")
    matcher = ItemMatcher(selection)
    by_file: dict[str, list[str]] = {}
    for test in baseline.results:
        by_file.setdefault(Outcomes.file_of(test), []).append(test)
    for path, chosen in sorted(selection.files.items()):
        tests = by_file.get(path, [])
        kept = [t for t in tests if matcher.verdict(path, t.split("::")[1:]).keep]
        fails = sum(1 for t in tests if t in failing)
        lines.append(
            f"  {path}: {len(kept)}/{len(tests)} tests kept, {fails} failing, "
            f"static_for={chosen.static_for!r}, decided by the record: {len(chosen.decided)}"
        )
        for reason in chosen.reasons[:3]:
            chain = " <- ".join(f"{h.dst} [{h.kind} {h.evidence}]" for h in reason.chain[:8])
            lines.append(f"    [{reason.source}] {reason.entity} {reason.note} {chain}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("ids", nargs="*")
    parser.add_argument("--source", default=".")
    args = parser.parse_args()
    report = json.loads(args.report.read_text())
    workspace = Workspace.resolve(args.source)
    config = report["config"]
    audit = Audit(workspace, AuditOptions(build=config["build"], test=config["test"]))
    audit.repair()
    audit.require_clean()
    record = Path(config["record"]) if config.get("record") else None
    baseline = Outcomes(report["baseline"]["results"], report["baseline"]["seconds"])
    excluded = set(report["baseline"]["excluded"])
    audit._index().close()  # builds the index when there is none
    chosen = [r for r in report["results"] if (r["id"] in args.ids if args.ids else interesting(r))]
    for result in chosen:
        mutation = Mutation(**{name: result[name] for name in MUTATION_FIELDS})
        target = audit.source / mutation.path
        audit.journal.change(mutation.path, rewrite(target.read_bytes(), mutation), mutation.id)
        try:
            selection = run_selection(workspace, record)
        finally:
            audit.journal.restore_all()
        failing = set(result["failing_tests"])
        recorded = Outcomes({**baseline.results, **{t: "failed" for t in failing}})
        comparison = compare(selection, recorded, baseline, excluded)
        print(
            f"{result['id']} {result['status']} {mutation.path}:{mutation.line} "
            f"{result['kind']}: failing files {result['failing_files']}, "
            f"selected {len(comparison.selected_files)}, missed {comparison.missed_files}"
        )
        print("\n".join(describe(selection, baseline, failing)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
