"""``torchtalk audit --replay REPORT``: the selection of an audit again, without the build
or the suite.

An audit's report holds, per mutation, the line before and after, its file and line, and
the tests that failed with it. Replaying re-applies each built mutation to the clean tree
through the audit's journal (so a kill is repaired the same way), runs only the
selection, compares it with the failures the report recorded, and restores the file byte
for byte. Comparing selection variants (precise mode on or off, a change to the engine)
then costs a selection per mutation, not a build and a suite run.

The tree must be the one the report audited: same HEAD, clean. Mutations that did not
build are carried over unchanged (the selection never ran for them).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from indexer.audit.compare import compare, require_record, run_selection
from indexer.audit.mutation import Mutation, rewrite
from indexer.audit.outcomes import Outcomes
from indexer.audit.report import SCHEMA, markdown, totals
from indexer.audit.run import Audit, AuditOptions, _git, _now, refreshed, sigterm_restores
from indexer.durable import write_atomic
from indexer.errors import UsageError
from indexer.query.index import Index
from indexer.workspace import Workspace

BUILT = ("caught", "uncaught")
MUTATION_FIELDS = ("id", "path", "line", "kind", "old", "new", "scope")


def load_report(path: Path) -> dict:
    """An audit report to replay; a UsageError (one line) when it is not one."""
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise UsageError(f"{path} is not a readable audit report: {error}") from None
    if not isinstance(report, dict) or report.get("schema") != SCHEMA:
        raise UsageError(f"{path} is not a {SCHEMA} report")
    if report.get("baseline") is None or not isinstance(report.get("results"), list):
        raise UsageError(f"{path} holds no baseline or results to replay")
    return report


def precise_mode(workspace: Workspace) -> dict:
    """What the index the selection reads says of precise mode (its ``meta.precise``)."""
    if not workspace.db_path.exists():
        return {"mode": "off", "reason": "no index yet"}
    index = Index(workspace.db_path)
    try:
        return index.meta_json("precise") or {"mode": "off", "reason": "not recorded"}
    finally:
        index.close()


class Replay:
    def __init__(
        self,
        workspace: Workspace,
        report_path: Path,
        out: Path | None = None,
        progress: Callable[[str], None] | None = None,
        use_record: bool = True,
    ) -> None:
        """``use_record=False`` selects with the static index alone where REPORT's audit
        had a record: the record's part of the selection, measured on the same failures."""
        self.original_path = report_path.resolve()
        self.original = load_report(self.original_path)
        config = self.original["config"]
        options = AuditOptions(build=config["build"], test=config["test"])
        self.audit = Audit(workspace, options, progress)
        self.workspace = workspace
        self.report_path = (out or self.audit.state_dir / "replay.json").resolve()
        if self.report_path == self.original_path:
            raise UsageError(f"--report {out} would overwrite the report being replayed")
        self.progress = progress or (lambda line: None)
        record = config.get("record") if use_record else None
        self.record = Path(record) if record else None

    def run(self) -> dict:
        with sigterm_restores():
            return self._run()

    def _run(self) -> dict:
        audit = self.audit
        repaired = audit.repair()
        if repaired:
            self.progress(f"restored what an interrupted audit left mutated: {', '.join(repaired)}")
        audit.require_clean()
        if self.record is not None:
            require_record(self.record)
        head = _git(audit.source, "rev-parse", "HEAD")
        if self.original["head"] != head:
            raise UsageError(
                f"{self.original_path} audited HEAD {self.original['head'][:12]}, "
                f"not this tree's {head[:12]}: check that commit out to replay it"
            )
        audit._index().close()  # builds the index when it cannot be updated in place
        baseline = Outcomes(
            self.original["baseline"]["results"], self.original["baseline"]["seconds"]
        )
        excluded = set(self.original["baseline"]["excluded"])
        report = {
            **{k: v for k, v in self.original.items() if k not in ("totals", "results")},
            "replay_of": str(self.original_path),
            "replayed_at": _now(),
            "precise": _precise_summary(precise_mode(self.workspace)),
            "config": {
                **self.original["config"],
                "report": str(self.report_path),
                "record": str(self.record) if self.record else None,
            },
            "results": [],
        }
        started = time.monotonic()
        try:
            for position, original in enumerate(self.original["results"], 1):
                if original["status"] not in BUILT:
                    report["results"].append(dict(original))
                    continue
                mutation = Mutation(**{name: original[name] for name in MUTATION_FIELDS})
                self.progress(f"[{position}/{len(self.original['results'])}] {mutation.describe()}")
                report["results"].append(self._replay_one(mutation, original, baseline, excluded))
        except KeyboardInterrupt:
            report["stopped"] = "interrupted"
            raise
        finally:
            audit.journal.restore_all()
            report["replay_seconds"] = round(time.monotonic() - started, 1)
            self._save(report)
        # The selections updated the index to each mutated tree: leave it the tree's.
        report["index_update"] = refreshed(self.workspace)
        report["finished_at"] = _now()
        self._save(report)
        return report

    def _replay_one(
        self,
        mutation: Mutation,
        original: dict,
        baseline: Outcomes,
        excluded: set[str],
    ) -> dict:
        journal = self.audit.journal
        target = self.audit.source / mutation.path
        journal.change(mutation.path, rewrite(target.read_bytes(), mutation), mutation.id)
        try:
            selection = run_selection(self.workspace, self.record)
        finally:
            for entry in journal.pending():
                journal.restore(entry)
        # The failures are the report's: the suite ran once, with the audit.
        recorded = Outcomes(
            {**baseline.results, **{test: "failed" for test in original["failing_tests"]}}
        )
        comparison = compare(selection, recorded, baseline, excluded)
        result = {**original, **comparison.to_dict()}
        result["failing_tests"] = original["failing_tests"]
        result["failing_files"] = original["failing_files"]
        result["selection_seconds"] = round(selection.timings.get("total_s", 0.0), 2)
        return result

    def _save(self, report: dict) -> None:
        report["totals"] = totals(report["results"])
        write_atomic(self.report_path, (json.dumps(report, indent=1) + "\n").encode())
        write_atomic(self.report_path.with_suffix(".md"), markdown(report).encode())


def _precise_summary(precise: dict) -> dict:
    """The part of ``meta.precise`` a reader of the replay needs to tell its variant."""
    keep = ("mode", "reason", "database", "tus", "failed", "merge")
    return {key: precise[key] for key in keep if key in precise}
