"""The one rule that merges a selection's two kinds of evidence.

The static walk (``indexer.select.engine``: walk, fallbacks, granularity) says, per test
file, which changed entities reach it and which of its tests that selects; the record
(``indexer.select.record_join``) says which changed entities it answers for, which tests
of each file it decides (the ones it trusts) and which of those it selects. The rule
(docs/selection.md, "Evidence"): **for the entities it answers, the record decides the
tests it trusts; the static walk decides the rest.** So a file's static evidence holds
for every one of its tests when an entity the record does not answer reaches it, and
only for the tests the record does not decide when every entity reaching it is one the
record answers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from indexer.select.model import Reason, SelectedFile, Selection
from indexer.select.record_join import RecordAnswer

DIRECT = -1  # the source of a test file selected for itself (changed, not indexable)


@dataclass
class StaticEvidence:
    """What the static walk found, before the record is laid over it."""

    # test file -> positions of the entities credited with reaching it (DIRECT: itself)
    sources: dict[str, set[int]] = field(default_factory=dict)
    # position of each widened entity -> the positions of the entities it stands for
    covers: dict[int, list[int]] = field(default_factory=dict)
    # (position, what names it) of the entities nothing reaches, even widened
    unreached: list[tuple[int, str]] = field(default_factory=list)


def answered_by_record(answer: RecordAnswer | None) -> frozenset[int]:
    """Positions of the changed entities the record answers for (none when unused)."""
    return frozenset(answer.answered) if answer is not None and answer.used else frozenset()


def walk_order(positions: int, answered: frozenset[int]) -> list[list[int]]:
    """The entity groups the static walk walks one after the other: first those the
    record does not answer, so a file they reach is credited to one of them (a walk
    credits each node to the first entity reaching it), then the others."""
    first = [p for p in range(positions) if p not in answered]
    second = [p for p in range(positions) if p in answered]
    return [group for group in (first, second) if group]


def _the_records(static: StaticEvidence, answered: frozenset[int], position: int) -> bool:
    """Whether the record answers for the entity at ``position`` (a widened entity: for
    every entity it stands for)."""
    covered = static.covers.get(position)
    if covered:
        return all(p in answered for p in covered)
    return position in answered


def settle_unreached(
    selection: Selection,
    static: StaticEvidence,
    answer: RecordAnswer | None,
    test_paths: Iterable[str],
) -> None:
    """An entity nothing reaches, even widened: one the record answers selects every test
    file for the tests the record does not decide; any other runs everything."""
    answered = answered_by_record(answer)
    for position, label in static.unreached:
        entity = selection.entities[position]
        if not _the_records(static, answered, position):
            selection.everything.append(
                f"nothing in the index reaches {label} (changed at {entity.evidence}): "
                "its users are invisible to the index (generated code, function pointers, "
                "dynamic lookup), so any test may reach it"
            )
            continue
        why = (
            f"nothing in the index reaches {entity.label} (changed at {entity.evidence}) but "
            "its ops: which tests run them is the record's answer; the tests it does not "
            "decide may reach it"
        )
        for path in test_paths:
            selected = selection.files.setdefault(path, SelectedFile(path))
            selected.reasons.append(Reason(entity.label, entity.evidence, note=why))
            static.sources.setdefault(path, set()).add(position)


def merge(selection: Selection, static: StaticEvidence, answer: RecordAnswer | None) -> None:
    """Lay the record's decisions over the static evidence in ``selection.files``, by
    the rule above."""
    answered = answered_by_record(answer)
    if answer is None or not answered:
        return  # the static evidence decides every test
    for path, selected in selection.files.items():
        sources = static.sources.get(path, ())
        record_only = all(_the_records(static, answered, p) for p in sources)
        selected.static_for = "unrecorded" if record_only else "all"
        selected.decided = answer.decided.get(path, set())
        selected.undecided = answer.undecided.get(path, 0)
    for path, groups in answer.selected.items():
        selected = selection.files.get(path)
        if selected is None:
            selected = selection.files[path] = SelectedFile(path, static_for=None)
            selected.decided = answer.decided.get(path, set())
            selected.undecided = answer.undecided.get(path, 0)
        selected.recorded_groups = groups
    selection.files = dict(sorted(selection.files.items()))
