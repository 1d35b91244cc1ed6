"""``--torchtalk-record-missing=BASE``: record only the tests a record lacks.

A recorded run cut short by a CI limit keeps the tests that finished (a partial record);
the test it stopped is unrecorded and the tests after it were never reached. Run again with
this option, the suite deselects every test BASE holds recorded and records the rest, as
``pytest --lf`` reruns only what failed; ``torchtalk record merge BASE NEW`` then makes
one record of both (docs/recording.md#completing-a-record).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.errors import TorchTalkError
from indexer.record import storage


class RecordMissing:
    """Registered by ``pytest_torchtalk.plugin`` next to the recording plugin."""

    def __init__(self, base: Path, recorded: frozenset[str]) -> None:
        self.base = base
        self.recorded = recorded  # node ids BASE holds with all of their work
        self.deselected = 0

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        kept = [item for item in items if item.nodeid not in self.recorded]
        dropped = [item for item in items if item.nodeid in self.recorded]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
        self.deselected = len(dropped)

    def pytest_report_collectionfinish(self, config: pytest.Config, items) -> str:
        return (
            f"torchtalk: {self.deselected} tests already recorded in {self.base} deselected; "
            f"recording the {len(items)} it lacks"
        )


def load_missing(
    base: Path,
    record_path: Path,
    tree: tuple[str | None, dict[str, str | None] | None],
) -> RecordMissing:
    """The plugin for BASE, or TorchTalkError (one line) when BASE cannot be completed by
    a run in this tree (its commit and uncommitted files, ``recording.tree_state``):
    unreadable, the record being written, or another tree state."""
    if base.resolve() == record_path.resolve():
        raise TorchTalkError(
            f"--torchtalk-record-missing={base} is the record this run writes: record the "
            "missing tests to another path and merge them with 'torchtalk record merge'"
        )
    # Only node ids and unrecorded reasons are needed, and each xdist worker opens BASE:
    # it is not decoded whole (RecordError, a TorchTalkError, when unreadable).
    record = storage.open_stored(base)
    commit, here = record.meta.get("commit"), tree[0]
    if not commit or commit != here:
        raise TorchTalkError(
            f"{base} was recorded at {str(commit)[:12] or 'no single commit'}, this tree is "
            f"at {str(here)[:12]}: its missing tests would be another tree's"
        )
    if (record.meta.get("dirty") or {}) != (tree[1] or {}):
        raise TorchTalkError(
            f"{base} was recorded with other uncommitted changes than this tree has "
            "(docs/recording.md#whose-record-it-is)"
        )
    return RecordMissing(base, frozenset(record.nodeids_seen_whole()))
