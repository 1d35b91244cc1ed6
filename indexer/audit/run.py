"""``torchtalk audit``: mutate, build, run every test, select, compare, restore.

The report (JSON, rewritten after every mutation) is also the audit's state: a run
resumed with the same configuration on the same HEAD goes on from the first mutation it
does not hold. Every file a mutation rewrites is journaled first (``journal.py``) and put
back byte for byte before the next one, on an exception or SIGTERM too; a run killed
outright leaves the journal, which the next run repairs before anything else.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from indexer.audit.compare import compare, require_record, run_selection
from indexer.audit.journal import Journal
from indexer.audit.mutation import Mutation, mutation_sites, plan, rewrite
from indexer.audit.outcomes import CRASH, Outcomes, run_command, run_suite
from indexer.audit.report import SCHEMA, markdown, totals
from indexer.durable import write_atomic
from indexer.errors import TorchTalkError, UsageError
from indexer.paths import under_any
from indexer.query.index import Index
from indexer.select.placement import categorize
from indexer.workspace import Workspace

STATE_DIR = "torchtalk-audit"  # under the tree's git directory: never part of its diff


@dataclass
class AuditOptions:
    build: str
    test: str
    mutations: int = 20
    seed: int = 0
    paths: list[str] = field(default_factory=list)
    budget_minutes: float | None = None
    resume: bool = False
    report: Path | None = None
    record: Path | None = None  # a recorded run for the selection, when the engine takes one
    baseline_runs: int = 2
    run_limit_minutes: float | None = None  # each test run's limit (default: from the baseline)

    def plan_key(self) -> dict:
        """What must match for a run to resume another's plan and results."""
        return {
            "build": self.build,
            "test": self.test,
            "mutations": self.mutations,
            "seed": self.seed,
            "paths": self.paths,
            "record": str(self.record) if self.record else None,
        }


def _git(source: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=source, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise UsageError(f"git {' '.join(args)} failed in {source}: {done.stderr.strip()}")
    return done.stdout.strip()


def _terminate_gracefully(signum, frame) -> None:
    raise KeyboardInterrupt  # unwinds through the restores in ``finally``


@contextmanager
def sigterm_restores() -> Iterator[None]:
    """While inside, SIGTERM unwinds like Ctrl-C, so a mutated file is restored."""
    previous = signal.signal(signal.SIGTERM, _terminate_gracefully)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class Audit:
    def __init__(
        self,
        workspace: Workspace,
        options: AuditOptions,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.workspace = workspace
        self.options = options
        self.source = Path(_git(workspace.source, "rev-parse", "--show-toplevel"))
        if self.source != workspace.source:
            raise UsageError(f"audit the root of the git tree: {self.source}")
        git_dir = Path(_git(self.source, "rev-parse", "--absolute-git-dir"))
        self.state_dir = git_dir / STATE_DIR
        self.journal = Journal(self.state_dir, self.source)
        self.report_path = options.report or self.state_dir / "report.json"
        self.progress = progress or (lambda line: None)
        self.started = time.monotonic()

    # --- the tree -------------------------------------------------------------------

    def repair(self) -> list[str]:
        """Restore what a killed run left mutated; the repaired paths."""
        return [f"{entry.path} ({entry.mutation})" for entry in self.journal.restore_all()]

    def require_clean(self) -> None:
        status = _git(self.source, "status", "--porcelain", "--untracked-files=all")
        if status:
            first = status.splitlines()[:5]
            raise UsageError(
                "the audit needs a clean git tree (ignored build outputs are fine); "
                f"changed or untracked: {'; '.join(line.strip() for line in first)}"
            )

    def _test_files(self) -> list[str]:
        index = self._index()
        try:
            return sorted(index.test_file_paths().values())
        finally:
            index.close()

    def _index(self) -> Index:
        """The tree's index, brought up to date first (the one refresh policy: built
        again when an update cannot do, as before every selection)."""
        from indexer.refresh import rebuild_reason, refresh_index

        reason = rebuild_reason(self.workspace)
        if reason is not None:
            self.progress(f"building the index of {self.source}: {reason}")
        refresh_index(self.workspace, show_progress=False)
        return Index(self.workspace.db_path)

    # --- the report -----------------------------------------------------------------

    def _load(self) -> dict | None:
        if not (self.options.resume and self.report_path.exists()):
            return None
        report = json.loads(self.report_path.read_text())
        if report.get("schema") != SCHEMA or report["config"]["plan"] != self.options.plan_key():
            raise UsageError(
                f"{self.report_path} is the report of another configuration: "
                "resume with the same --build, --test, --mutations, --seed and --paths"
            )
        if report["head"] != self.head:
            raise UsageError(
                f"{self.report_path} audited HEAD {report['head'][:12]}, not {self.head[:12]}"
            )
        return report

    def _save(self, report: dict) -> None:
        report["totals"] = totals(report["results"])
        write_atomic(self.report_path, (json.dumps(report, indent=1) + "\n").encode())
        write_atomic(self.report_path.with_suffix(".md"), markdown(report).encode())

    # --- the run --------------------------------------------------------------------

    def run(self) -> dict:
        with sigterm_restores():
            return self._run()

    def _run(self) -> dict:
        repaired = self.repair()
        if repaired:
            self.progress(f"restored what an interrupted audit left mutated: {', '.join(repaired)}")
        self.require_clean()
        if self.options.record is not None:
            require_record(self.options.record)
        self.head = _git(self.source, "rev-parse", "HEAD")
        tests = self._test_files()
        if not tests:
            raise UsageError(f"the index of {self.source} holds no test files")
        report = self._load() or self._new_report()
        report["repaired"] = report.get("repaired", []) + repaired
        report["stopped"] = None
        if report["baseline"] is None:
            report["baseline"] = self._baseline(tests)
            self._save(report)
        if report["plan"] is None:
            report["plan"] = [m.to_dict() for m in self._plan()]
            if len(report["plan"]) < self.options.mutations:
                self.progress(
                    f"planned {len(report['plan'])} of {self.options.mutations} mutations: "
                    "no more lines under --paths take one"
                )
            self._save(report)
        baseline = Outcomes(report["baseline"]["results"], report["baseline"]["seconds"])
        excluded = set(report["baseline"]["excluded"])
        done = {result["id"] for result in report["results"]}
        todo = [Mutation(**m) for m in report["plan"] if m["id"] not in done]
        try:
            for position, mutation in enumerate(todo, len(done) + 1):
                if self._over_budget():
                    report["stopped"] = f"budget of {self.options.budget_minutes:g} minutes"
                    break
                self.progress(f"[{position}/{len(report['plan'])}] {mutation.describe()}")
                try:
                    result = self._measure(mutation, tests, baseline, excluded)
                except _BudgetSpent:
                    report["stopped"] = f"budget of {self.options.budget_minutes:g} minutes"
                    break
                report["results"].append(result)
                self._save(report)
                self.progress(f"    {_summary(result)}")
        except KeyboardInterrupt:
            report["stopped"] = "interrupted: resume with --resume"
            raise
        finally:
            self.journal.restore_all()
            self._save(report)
        # The last mutation was built; build the restored tree so it is as it was.
        rebuilt = run_command(self.options.build, self.source)
        report["final_build"] = {"ok": rebuilt.ok, "seconds": round(rebuilt.seconds, 1)}
        # The selections updated the index to each mutated tree: leave it the tree's.
        report["index_update"] = refreshed(self.workspace)
        report["finished_at"] = _now()
        self._save(report)
        return report

    def _over_budget(self) -> bool:
        budget = self.options.budget_minutes
        return budget is not None and time.monotonic() - self.started > budget * 60

    def _deadline(self) -> float | None:
        """When --budget runs out, as a ``time.monotonic()`` value."""
        budget = self.options.budget_minutes
        return None if budget is None else self.started + budget * 60

    def _limit(self, default: float | None, test_run: bool = True) -> float | None:
        """Seconds one command may run: a mutation's test run --run-limit (else
        ``default``), and any command never past what is left of --budget (a hanging
        suite must not outlive the audit's budget)."""
        limits = [default] if default is not None else []
        if test_run and self.options.run_limit_minutes is not None:
            limits = [self.options.run_limit_minutes * 60]
        if self.options.budget_minutes is not None:
            left = self.options.budget_minutes * 60 - (time.monotonic() - self.started)
            limits.append(max(left, 1.0))
        return min(limits) if limits else None

    def _new_report(self) -> dict:
        return {
            "schema": SCHEMA,
            "source": str(self.source),
            "harness": self.workspace.harness,
            "head": self.head,
            "started_at": _now(),
            "config": {
                **asdict(self.options)
                | {
                    "report": str(self.report_path),
                    "record": str(self.options.record or "") or None,
                },
                "plan": self.options.plan_key(),
            },
            "selection": "static"
            if self.options.record is None
            else f"with record {self.options.record}",
            "baseline": None,
            "plan": None,
            "results": [],
        }

    def _baseline(self, tests: list[str]) -> dict:
        self.progress(f"baseline: building with `{self.options.build}`")
        built = run_command(self.options.build, self.source, timeout=self._limit(None, False))
        if built.timed_out:
            raise AuditStopped(f"the baseline build `{self.options.build}` {_limits(self)}")
        if not built.ok:
            raise UsageError(
                f"the unmutated tree does not build with `{self.options.build}`:\n{built.tail}"
            )
        runs = []
        for number in range(self.options.baseline_runs):
            self.progress(f"baseline: test run {number + 1} of {self.options.baseline_runs}")
            run = run_suite(
                self.options.test,
                self.source,
                tests,
                self._limit(None, False),  # --budget's; its --run-limit default comes from it
                per_file_after_timeout=False,
            )
            if run.timed_out:
                raise AuditStopped(f"the baseline test run `{self.options.test}` {_limits(self)}")
            runs.append(run)
        first = runs[0]
        if not first.results:
            raise UsageError(f"`{self.options.test}` reported no tests:\n{first.command.tail}")
        if not any(result == "passed" for result in first.results.values()):
            # Every test excluded: each mutation would measure nothing (issue 40).
            raise UsageError(
                f"no test passes in the unmutated tree with `{self.options.test}` "
                f"({_outcome_counts(first.results)}): nothing to measure; "
                f"last output: {_last_line(first.command.tail)}"
            )
        failing = set().union(*(run.failing() for run in runs))
        flaky = {
            test
            for test in set().union(*(run.results for run in runs))
            if len({run.results.get(test) for run in runs}) > 1
        }
        excluded = sorted(failing | flaky)
        return {
            "results": first.results,
            "seconds": first.seconds,
            "tests": len(first.results),
            "suite_seconds": round(sum(first.seconds.values()), 2),
            "wall_seconds": round(first.command.seconds, 1),
            "build_seconds": round(built.seconds, 1),
            "excluded": excluded,
            "failing": sorted(failing),
            "flaky": sorted(flaky - failing),
        }

    def _plan(self) -> list[Mutation]:
        index = self._index()
        try:
            sites = mutation_sites(
                self.source,
                index,
                self.options.paths,
                lambda path: not mutable(path, self.workspace.manifest),
            )
        finally:
            index.close()
        if not sites:
            raise UsageError("no function body or header line to mutate under the given --paths")
        return plan(sites, self.options.mutations, self.options.seed)

    def _measure(
        self, mutation: Mutation, tests: list[str], baseline: Outcomes, excluded: set[str]
    ) -> dict:
        result = {**mutation.to_dict(), "control": mutation.control}
        started = time.monotonic()
        target = self.source / mutation.path
        self.journal.change(mutation.path, rewrite(target.read_bytes(), mutation), mutation.id)
        try:
            built = run_command(self.options.build, self.source, timeout=self._limit(None, False))
            result["build_seconds"] = round(built.seconds, 1)
            if not built.ok and built.timed_out and self._over_budget():
                raise _BudgetSpent  # cut by --budget, not broken: --resume builds it again
            if not built.ok:
                result.update(status="not building", build_output=built.tail)
                return _empty(result)
            selection = run_selection(self.workspace, self.options.record)
            timeout = self._limit(max(600.0, 10 * sum(baseline.seconds.values())))
            outcomes = run_suite(
                self.options.test, self.source, tests, timeout, deadline=self._deadline()
            )
            if outcomes.cut:
                raise _BudgetSpent  # cut by --budget: no result, --resume runs it again
            comparison = compare(selection, outcomes, baseline, excluded)
            result.update(comparison.to_dict())
            result["status"] = "caught" if comparison.caught else "uncaught"
            result["suite_seconds"] = round(sum(baseline.seconds.values()), 2)
            result["per_file_rerun"] = outcomes.per_file
            result["selection_seconds"] = round(selection.timings.get("total_s", 0.0), 2)
            return result
        finally:
            for entry in self.journal.pending():
                self.journal.restore(entry)
            result["seconds"] = round(time.monotonic() - started, 1)


class AuditStopped(TorchTalkError):
    """A command of the audit ran past its limit; the tree is restored."""


def _limits(audit: Audit) -> str:
    options = audit.options
    given = [f"--budget {options.budget_minutes:g}"] if options.budget_minutes is not None else []
    if options.run_limit_minutes is not None:
        given.append(f"--run-limit {options.run_limit_minutes:g}")
    return f"did not finish within its limit ({', '.join(given) or 'none given'} minutes)"


def _outcome_counts(results: dict[str, str]) -> str:
    counts: dict[str, int] = {}
    for test, result in results.items():
        kind = "crashed" if test.endswith(f"::{CRASH}") else result
        counts[kind] = counts.get(kind, 0) + 1
    return ", ".join(f"{count} {kind}" for kind, count in sorted(counts.items()))


def _last_line(tail: str) -> str:
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return lines[-1][:200] if lines else "(none)"


def mutable(path: str, manifest) -> bool:
    """Source the audit mutates: indexed C++/CUDA/Python outside the test directories and
    the run-everything files (a change to setup.py measures nothing)."""
    if under_any(path, manifest.list("tests", "dirs")):
        return False
    return categorize(path, manifest)[0] in ("cpp", "cuda", "python")


class _BudgetSpent(Exception):
    """A mutation's build or test run cut because --budget ran out: no result, so
    --resume runs it again."""


def _empty(result: dict) -> dict:
    result.update(
        failing_tests=[],
        failing_files=[],
        selected_files=[],
        missed_tests=[],
        missed_files=[],
        run_everything=[],
        empty_reason=None,
        tests_selected=0,
        seconds_saved=0.0,
        suite_seconds=0.0,
        entities=[],
    )
    return result


def _summary(result: dict) -> str:
    if result["status"] == "not building":
        return "does not build"
    selected = (
        "everything" if result["run_everything"] else f"{len(result['selected_files'])} selected"
    )
    missed = (
        f", MISSED {', '.join(result['missed_files'] or result['missed_tests'])}"
        if (result["missed_files"] or result["missed_tests"])
        else ""
    )
    return (
        f"{result['status']}: {len(result['failing_files'])} failing files, {selected}{missed} "
        f"({result['seconds']:.0f} s)"
    )


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def tty_progress(line: str) -> None:
    if sys.stderr.isatty():
        print(line, file=sys.stderr, flush=True)


def refreshed(workspace: Workspace) -> str:
    """Refresh the index (``indexer.refresh``); what was done, in a few words."""
    from indexer.refresh import refresh_index

    try:
        return refresh_index(workspace, show_progress=False).describe()
    except (TorchTalkError, OSError, sqlite3.Error) as exc:
        return f"updating it failed ({exc})"
