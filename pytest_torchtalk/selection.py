"""``pytest --torchtalk-affected``: deselect the tests the git diff cannot affect.

A test file the selection rules out is not collected at all (``pytest_ignore_collect``, as
pytest-testmon does): it is not imported, so it costs nothing and cannot stop the run by
failing to import. Files the selection keeps only some tests of are collected, and the
rest of their items deselected. Files and node ids named on the command line are always
collected, and their tests never deselected.

The selection is computed once (on the xdist controller, or in the only process) and
handed to xdist workers through ``workerinput``; each worker reports its counts back
through ``workeroutput`` so the controller's summary, JSON report, JUnit properties and
GitHub job summary are right.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pytest
from _pytest.python import path_matches_patterns

from indexer import durable
from indexer.errors import TorchTalkError
from indexer.paths import printable
from indexer.select.matching import ItemMatcher
from indexer.select.model import Selection
from indexer.select_changes import select_changes
from indexer.wording import plural
from indexer.workspace import Workspace
from pytest_torchtalk.report import (
    files_selected,
    markdown_table,
    selection_from_dict,
    selection_to_dict,
    shown_lines,
    summary_lines,
)

WORKER_INPUT = "torchtalk_selection"
# Modules pytest imports for what they are, whatever python_files says (``*.py``).
NOT_TEST_MODULES = ("__init__.py", "conftest.py")
WORKER_OUTPUT = "torchtalk_counts"


def _option(config: pytest.Config, name: str, ini: str) -> str | None:
    value = config.getoption(name)
    if value:
        return str(value)
    return str(config.getini(ini) or "") or None


@dataclass
class Counts:
    collected: int = 0
    selected: int = 0
    deselected: int = 0
    explicit: int = 0  # kept only because they were named on the command line
    by_record: int = 0  # selected or deselected as a recorded run decided
    files_not_collected: int = 0  # test files ruled out, so never collected (nor imported)
    files_run: int = 0  # test files with a test that runs
    files_nothing_to_run: int = 0  # collected, every test deselected (the record decided)
    from_workers: bool = False
    workers_handed: int = 0  # xdist workers that used the controller's selection

    def as_dict(self) -> dict[str, int]:
        counts = {
            "collected": self.collected,
            "selected": self.selected,
            "deselected": self.deselected,
            "explicitly_named": self.explicit,
            "decided_by_record": self.by_record,
            "test_files_not_collected": self.files_not_collected,
            "test_files_run": self.files_run,
            "test_files_collected_nothing_to_run": self.files_nothing_to_run,
        }
        if self.from_workers:
            counts["xdist_workers_given_the_selection"] = self.workers_handed
        return counts


@dataclass
class _Explicit:
    """A file or node id named on the command line."""

    path: Path
    parts: list[str] = field(default_factory=list)

    def names(self, item: pytest.Item) -> bool:
        if Path(item.path) != self.path:
            return False
        item_parts = item.nodeid.split("::")[1:]
        if len(self.parts) > len(item_parts):
            return False
        for wanted, have in zip(self.parts, item_parts, strict=False):
            if wanted != have and wanted != have.split("[", 1)[0]:
                return False
        return True


class AffectedSelection:
    """The plugin object registered by ``pytest_torchtalk.plugin`` when selection is on."""

    report_path: Path | None = None  # the JSON report (controller only)
    # True collects ruled-out files too and deselects their items, as the plugin did
    # before; only bench/collection.py sets it, to measure what not collecting saves.
    collect_ruled_out = False

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.counts = Counts()
        worker_input = getattr(config, "workerinput", None)
        self.is_worker = worker_input is not None
        self.handed = worker_input is not None and WORKER_INPUT in worker_input
        if self.handed:
            self.selection = selection_from_dict(worker_input[WORKER_INPUT])
        else:
            self.report_path = self._report_path()  # checked before an hour of tests runs
            self.selection = self._compute()
        self.source = Path(self.selection.source)
        self.matcher = ItemMatcher(self.selection)
        self.files_not_collected = 0

    def _report_path(self) -> Path | None:
        report = _option(self.config, "--torchtalk-report", "torchtalk_report")
        if not report:
            return None
        path = self.config.invocation_params.dir / report
        problem = durable.write_problem(path)
        if problem:
            raise pytest.UsageError(f"torchtalk: --torchtalk-report {report}: {problem}")
        return path

    def _compute(self) -> Selection:
        config = self.config
        # --torchtalk-source is relative to where pytest runs, the ini value to the rootdir.
        option = config.getoption("--torchtalk-source")
        if option:
            source = str(config.invocation_params.dir / option)
        else:
            source = str(config.rootpath / (config.getini("torchtalk_source") or "."))
        harness = _option(config, "--torchtalk-harness", "torchtalk_harness")
        base = _option(config, "--torchtalk-base", "torchtalk_base")
        try:
            return select_changes(Workspace.resolve(source, harness), base)
        except TorchTalkError as exc:
            raise pytest.UsageError(f"torchtalk: {exc}") from None

    # --- xdist ------------------------------------------------------------------------

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        # With every test named: a worker's verdicts look tests up by name.
        node.workerinput[WORKER_INPUT] = selection_to_dict(self.selection, tests=True)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        counts = dict(getattr(node, "workeroutput", {}).get(WORKER_OUTPUT) or {})
        if not counts:
            return
        handed = counts.pop("handed", False)
        if not self.counts.from_workers:
            # Every worker collects the same items; one worker's counts are the run's.
            self.counts = Counts(**counts, from_workers=True)
        self.counts.workers_handed += bool(handed)

    # --- header, deselection ----------------------------------------------------------

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        selection = self.selection
        base = selection.base
        head = (
            f"torchtalk: tests affected by changes since {base['rev']} ({base['merge_base'][:12]})"
        )
        if selection.run_everything:  # a reason may quote a file name: escaped
            return shown_lines([f"{head}: running everything: {selection.everything[0]}"])
        if selection.empty_reason:
            return shown_lines([f"{head}: nothing affected: {selection.empty_reason}"])
        line = (
            f"{head}: {len(selection.running)} of "
            f"{plural(selection.test_files_total, 'test file')}"
            f", from {plural(len(selection.entities), 'changed entity', 'changed entities')}"
        )
        if selection.nothing_to_run:
            line += f" ({len(selection.nothing_to_run)} more decided by the record: nothing to run)"
        return shown_lines([line])

    @cached_property
    def _explicit(self) -> list[_Explicit]:
        config = self.config
        if config.args_source != pytest.Config.ArgsSource.ARGS:
            return []
        named = []
        for arg in config.args:
            path_part, *parts = arg.split("::")
            path = (config.invocation_params.dir / path_part).resolve()
            if path.is_file():
                named.append(_Explicit(path, parts))
        return named

    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool | None:
        """True for a test module the selection rules out (no test of it runs), unless it
        was named on the command line; None leaves the decision to pytest."""
        if self.collect_ruled_out or self.selection.run_everything:
            return None
        if collection_path.suffix != ".py" or collection_path.name in NOT_TEST_MODULES:
            return None
        if not path_matches_patterns(collection_path, config.getini("python_files")):
            return None  # not a test module to pytest: collected (or not) as ever
        path = collection_path.resolve()
        try:
            relative = path.relative_to(self.source).as_posix()
        except ValueError:
            return None  # outside the indexed tree: not ours to judge
        if printable(relative) in self.selection.files:  # as a selection keys a non-UTF-8 name
            return None
        if any(named.path == path for named in self._explicit):
            return None
        # pytest asks about every file of a directory it walks towards an argument; only
        # those within one would be collected, and only they count as ruled out.
        if not any(path.is_relative_to(arg) for arg in self._argument_paths):
            return None
        self.files_not_collected += 1
        return True

    @cached_property
    def _argument_paths(self) -> list[Path]:
        """The paths pytest collects from: the arguments' files and directories."""
        config = self.config
        return [
            (config.invocation_params.dir / arg.split("::")[0]).resolve() for arg in config.args
        ]

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        explicit = self._explicit
        kept: list[pytest.Item] = []
        dropped: list[pytest.Item] = []
        counts = Counts(collected=len(items), files_not_collected=self.files_not_collected)
        running: set[Path] = set()  # test files with an item kept
        collected_files: set[Path] = set()
        for item in items:
            collected_files.add(Path(item.path))
            try:
                path = Path(item.path).resolve().relative_to(self.source).as_posix()
            except ValueError:
                kept.append(item)  # outside the indexed tree: not ours to judge
                running.add(Path(item.path))
                continue
            verdict = self.matcher.verdict(path, item.nodeid.split("::")[1:])
            counts.by_record += verdict.decided_by == "record"
            if verdict.keep:
                kept.append(item)
            elif any(named.names(item) for named in explicit):
                counts.explicit += 1
                kept.append(item)
            else:
                dropped.append(item)
                continue
            running.add(Path(item.path))
        counts.selected, counts.deselected = len(kept), len(dropped)
        counts.files_run = len(running)
        counts.files_nothing_to_run = len(collected_files - running)
        self.counts = counts
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
        if self.is_worker:
            config.workeroutput[WORKER_OUTPUT] = {
                "collected": counts.collected,
                "selected": counts.selected,
                "deselected": counts.deselected,
                "explicit": counts.explicit,
                "by_record": counts.by_record,
                "files_not_collected": counts.files_not_collected,
                "files_run": counts.files_run,
                "files_nothing_to_run": counts.files_nothing_to_run,
                "handed": self.handed,
            }

    # --- results ----------------------------------------------------------------------

    def _deselected_everything(self) -> bool:
        counts = self.counts
        ruled_out = counts.collected > 0 or counts.files_not_collected > 0
        return ruled_out and counts.selected == 0

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_worker:
            return
        if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and self._deselected_everything():
            session.exitstatus = pytest.ExitCode.OK
        counts = self.counts.as_dict()
        self._junit_properties(counts)
        if self.report_path is not None:
            tests = bool(
                self.config.getoption("--torchtalk-report-tests")
                or self.config.getini("torchtalk_report_tests")
            )
            text = json.dumps(selection_to_dict(self.selection, counts, tests), indent=2)
            try:
                durable.write_atomic(self.report_path, (text + "\n").encode("utf-8"))
            except OSError as exc:  # checked at start; the disk may fill meanwhile
                reporter = self.config.get_terminal_writer()
                reporter.line(f"torchtalk: cannot write the report {self.report_path}: {exc}")
                session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:
            with open(summary, "a", encoding="utf-8") as handle:
                handle.write(markdown_table(self.selection, counts))

    def _junit_properties(self, counts: dict[str, int]) -> None:
        from _pytest.junitxml import xml_key

        xml = self.config.stash.get(xml_key, None)
        if xml is None:
            return
        selection = self.selection
        properties = {
            "torchtalk_run_everything": str(selection.run_everything).lower(),
            "torchtalk_test_files_total": selection.test_files_total,
            "torchtalk_test_files_selected": files_selected(selection),
            "torchtalk_tests_selected": counts["selected"],
            "torchtalk_tests_deselected": counts["deselected"],
            "torchtalk_changed_entities": len(selection.entities),
            "torchtalk_tests_decided_by_record": counts["decided_by_record"],
            "torchtalk_record": (selection.record.get("label") or "none")
            if selection.record.get("used", False)
            else "not used"
            if selection.record
            else "none",
        }
        for name, value in properties.items():
            xml.add_global_property(name, value)

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int, config) -> None:
        if self.is_worker:
            return
        terminalreporter.section("torchtalk selection")
        for line in summary_lines(self.selection, limit=10):
            terminalreporter.write_line(line)
        counts = self.counts
        line = f"tests: {counts.selected} selected, {counts.deselected} deselected"
        if counts.by_record:
            line += f" ({counts.by_record} of them decided by the record)"
        if counts.explicit:
            line += f" ({counts.explicit} kept because named on the command line)"
        if counts.files_not_collected:
            line += (
                f"; {plural(counts.files_not_collected, 'test file')} ruled out, so not collected"
            )
        terminalreporter.write_line(line)
        if counts.collected:
            line = f"test files run: {counts.files_run}"
            if counts.files_nothing_to_run:
                line += (
                    f"; {counts.files_nothing_to_run} collected with nothing to run (every test"
                    " deselected: decided by the record)"
                )
            terminalreporter.write_line(line)
        if self._deselected_everything():
            terminalreporter.write_line(
                "every test was ruled out or deselected on evidence: exit status 0, not 5"
            )
