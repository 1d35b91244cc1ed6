"""Preparing an index for selections (``indexer.refresh.prepare_for_selection``) copies
the whole index: it must not do so again and again for an index it already failed on,
nor twice when two processes find the same index unprepared (docs/selection.md, "A
current index")."""

from __future__ import annotations

import os
import shutil
import sqlite3
import threading
import time
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

import indexer.build
from indexer import refresh
from indexer.query.index import Index
from indexer.refresh import Refresh, prepare_for_selection, refresh_index
from indexer.select import derived
from indexer.store.db import connect_writable
from indexer.workspace import Workspace

REFUSED = "derived rows refused by the index"


def _prepare_calls(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every derivation started from now on (the real one runs)."""
    calls: list[Path] = []
    real = derived.prepare

    def counting(source: Path, db_path: Path, conn: sqlite3.Connection) -> derived.Prepared:
        calls.append(db_path)
        return real(source, db_path, conn)

    monkeypatch.setattr(derived, "prepare", counting)
    return calls


def _unprepared(repo: Path, *, refuse: bool = False) -> Workspace:
    """The repository's index, built, then as one never prepared for selections (and,
    with ``refuse``, one that refuses the row saying it is prepared: every derivation
    of it and of its copies fails)."""
    workspace = Workspace.resolve(repo)
    assert refresh_index(workspace, show_progress=False).how == "built"
    with closing(sqlite3.connect(workspace.db_path)) as conn, conn:
        conn.execute("DELETE FROM derived WHERE name = ?", (derived.PREPARED,))
        if refuse:
            conn.execute(
                "CREATE TRIGGER refuse_prepared BEFORE INSERT ON derived"
                f" WHEN NEW.name = '{derived.PREPARED}'"
                f" BEGIN SELECT RAISE(ABORT, '{REFUSED}'); END"
            )
    return workspace


def _identity(path: Path) -> tuple[int, int]:
    found = path.stat()
    return found.st_ino, found.st_mtime_ns


def test_a_failure_to_prepare_is_recorded_and_not_repeated_until_the_index_changes(
    minitorch_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = _unprepared(minitorch_repo, refuse=True)
    db_path = workspace.db_path
    calls = _prepare_calls(monkeypatch)

    first = refresh_index(workspace, show_progress=False)
    assert first.how == "up to date"
    assert len(calls) == 1
    assert REFUSED in (first.prepare_problem or "")
    recorded = _identity(db_path)

    again = refresh_index(workspace, show_progress=False)
    assert len(calls) == 1  # neither copied nor derived again
    assert _identity(db_path) == recorded
    assert REFUSED in (again.prepare_problem or "")
    with closing(Index(db_path)) as index:
        assert not derived.is_prepared(index)
        assert REFUSED in (refresh.failed_before(index) or "")  # recorded in the index

    # Once the index changes, preparing is tried again (and fails again here).
    module = minitorch_repo / "minitorch" / "functional.py"
    module.write_text(module.read_text() + "\n\ndef added_by_the_test():\n    return 1\n")
    changed = refresh_index(workspace, show_progress=False)
    assert changed.how == "updated"
    assert len(calls) == 2
    assert REFUSED in (changed.prepare_problem or "")


def test_a_refresh_waiting_for_the_lock_does_not_prepare_what_another_prepared_meanwhile(
    minitorch_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = _unprepared(minitorch_repo)
    db_path = workspace.db_path
    calls = _prepare_calls(monkeypatch)

    waiting = threading.Event()
    real_lock = indexer.build.build_lock

    @contextmanager
    def noted_lock(index_dir: Path, wait: bool = True):
        waiting.set()  # the refresh found the index unprepared and asks for the lock
        with real_lock(index_dir, wait):
            yield

    monkeypatch.setattr(indexer.build, "build_lock", noted_lock)
    monkeypatch.setattr(refresh, "build_lock", noted_lock, raising=False)
    done = Refresh("up to date", "")
    failures: list[BaseException] = []

    def other_refresh() -> None:
        try:
            prepare_for_selection(workspace, done)
        except BaseException as exc:  # reported by the test below
            failures.append(exc)

    with real_lock(db_path.parent):
        thread = threading.Thread(target=other_refresh)
        thread.start()
        assert waiting.wait(30)
        time.sleep(0.3)  # it is blocked on the lock this test holds
        # Meanwhile this process prepares the index, as another refresh would.
        tmp = db_path.with_name(f"{db_path.name}.by-the-test")
        shutil.copyfile(db_path, tmp)
        with closing(connect_writable(tmp)) as conn:
            derived.prepare(workspace.source, tmp, conn)
        os.replace(tmp, db_path)
        prepared_by_the_test = _identity(db_path)
    thread.join(60)
    assert not thread.is_alive() and not failures
    assert len(calls) == 1  # the test's own: the waiting refresh found it prepared
    assert _identity(db_path) == prepared_by_the_test
    with closing(Index(db_path)) as index:
        assert derived.is_prepared(index)
