"""What the selection kept against what really failed, for one mutation.

The selection is the engine's (``indexer.select_changes.select_changes``) for the diff the
mutation makes against HEAD, read as pytest would apply it: a failing test is selected
when ``ItemMatcher`` keeps its item. ``record`` is the recorded run a selection may use
besides the static index; the audit passes it through only when one is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from indexer.audit.outcomes import COLLECTION, CRASH, Outcomes
from indexer.errors import UsageError
from indexer.query.recorded import RecordedRuns
from indexer.record.storage import RecordError
from indexer.select.matching import ItemMatcher
from indexer.select.model import Selection
from indexer.select_changes import select_changes
from indexer.workspace import Workspace


def run_selection(workspace: Workspace, record: Path | None = None) -> Selection:
    """The selection for the working tree's changes since HEAD: static alone, or with
    ``record``."""
    return select_changes(workspace, "HEAD", record=record if record is not None else False)


def require_record(path: Path) -> None:
    """A UsageError (one line) unless ``path`` is a record the selection can read. The
    selection falls back to the static index without one, saying so; an audit of the
    selection with a record would then measure the other thing under its name."""
    try:
        RecordedRuns.cached(path)
    except (RecordError, OSError) as error:
        raise UsageError(f"the record {path} cannot be read: {error}") from None


@dataclass
class Comparison:
    failing_tests: list[str]
    failing_files: list[str]
    selected_files: list[str]  # of the suite's files; all of them when it runs everything
    missed_tests: list[str]
    missed_files: list[str]
    run_everything: list[str]  # the selection's reasons; [] when selective
    empty_reason: str | None
    tests_selected: int  # of the suite's tests, the items the selection keeps
    seconds_saved: float  # baseline time of the tests the selection skips
    entities: list[str] = field(default_factory=list)
    outside_suite: list[str] = field(default_factory=list)  # selected, not run by the suite

    @property
    def caught(self) -> bool:
        return bool(self.failing_tests)

    @property
    def safe(self) -> bool:
        return not self.missed_files and not self.missed_tests

    def to_dict(self) -> dict:
        return {
            "failing_tests": self.failing_tests,
            "failing_files": self.failing_files,
            "selected_files": self.selected_files,
            "missed_tests": self.missed_tests,
            "missed_files": self.missed_files,
            "run_everything": self.run_everything,
            "empty_reason": self.empty_reason,
            "tests_selected": self.tests_selected,
            "seconds_saved": round(self.seconds_saved, 3),
            "entities": self.entities,
            "outside_suite": self.outside_suite,
        }


def keeps(matcher: ItemMatcher, test: str) -> bool:
    path, *parts = test.split("::")
    if parts in ([COLLECTION], [CRASH]):  # the whole file failed: kept if any of it runs
        return matcher.selection.run_everything or path in matcher.selection.files
    return matcher.verdict(path, parts).keep


def compare(
    selection: Selection,
    outcomes: Outcomes,
    baseline: Outcomes,
    excluded: set[str],
) -> Comparison:
    matcher = ItemMatcher(selection)
    failing = sorted(outcomes.failing() - excluded)
    failing_files = sorted({Outcomes.file_of(test) for test in failing})
    kept = [test for test in baseline.results if keeps(matcher, test)]
    # The suite is what the test command ran: a file it does not run (outside a
    # `pytest test/a.py test/b.py` suite, or without a test) can be neither missed nor
    # judged, so it is counted apart, not as selected.
    suite = {Outcomes.file_of(test) for test in baseline.results}
    outside = sorted(path for path in selection.files if path not in suite)
    if selection.run_everything:
        selected_files = sorted(suite)
    else:
        # A file runs when one of its tests is kept: a file the static walk names whose
        # every test a record decides against runs nothing.
        running = {Outcomes.file_of(test) for test in kept}
        # pytest --torchtalk-affected collects every file the selection lists (its
        # pytest_ignore_collect rules out only the others), so a listed file that fails to
        # import fails the run even when the record deselects each of its tests.
        collected = {
            Outcomes.file_of(test)
            for test in failing
            if test.split("::")[1:] == [COLLECTION] and keeps(matcher, test)
        }
        selected_files = sorted(running | collected)
    missed_tests = [test for test in failing if not keeps(matcher, test)]
    missed_files = sorted(set(failing_files) - set(selected_files))
    skipped_time = sum(
        seconds for test, seconds in baseline.seconds.items() if not keeps(matcher, test)
    )
    return Comparison(
        failing,
        failing_files,
        selected_files,
        missed_tests,
        missed_files,
        list(selection.everything),
        selection.empty_reason,
        len(kept),
        skipped_time,
        [entity.label for entity in selection.entities],
        outside,
    )
