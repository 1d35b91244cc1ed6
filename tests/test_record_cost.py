"""What recording costs: the recorder's own work is not observed, and code objects are
named once per process (docs/recording.md#cost).

Each check runs the compiled recorder for real in a child Python (its profile function
and RecordFunction callback are process-wide), on a tree the test writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.record_support import require_torch

# Run in the child: prints one JSON object of what it saw.
_CHILD = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    root, other = Path(sys.argv[1]), Path(sys.argv[2])
    sys.path.insert(0, str(root))
    from indexer.record import native
    from indexer.record.journal import JournalWriter
    from indexer.record.model import Record, RecordedTest
    from indexer.record.observer import Observer

    observer = Observer(root, follow_children=False)
    lib = observer._lib
    import costpkg

    def functions(observed):
        return sorted(text for kind, text in observed.names if kind == "function")

    def raw_window():
        # Every code object the profile function saw since the last drain, named or not.
        named, unnamed = lib.tt_drain_codes()
        return named, {code.co_qualname for code in unnamed}

    out = {}
    costpkg.first()
    out["first"] = functions(observer.close())
    costpkg.first()
    named, unnamed = raw_window()  # first's code object was named by the close above
    out["named_again"] = sorted(text for kind, text in named if kind == "function")
    out["unnamed_again"] = sorted(q for q in unnamed if q.startswith("first"))
    observer.close()

    with native.quiet():
        costpkg.hidden()
        with native.quiet():  # nested
            costpkg.hidden()
        costpkg.hidden()
    costpkg.after()
    out["quiet"] = functions(observer.close())

    lib.tt_forget_code_names()  # the next raw window hands back every code object
    _, unnamed = raw_window()
    out["own_after_close"] = sorted(q for q in unnamed if q.startswith("Observer."))

    record = Record(meta={})
    segment = record.add_segment("test", "t")
    record.segments[segment].names |= {record.name_id("function", "costpkg/__init__.py:first")}
    writer = JournalWriter(root / "j.ttj", root, {})
    observer.close()
    lib.tt_forget_code_names()
    writer.test(record, {segment: [0]}, RecordedTest("t", "t.py", "passed", 0.0, [segment]))
    _, unnamed = raw_window()
    out["own_journal"] = sorted(q for q in unnamed if q.startswith("JournalWriter."))

    # A second observer, of another tree: names are that tree's, not the first one's.
    observer.stop()
    sys.path.insert(0, str(other))
    second = Observer(other, follow_children=False)
    import otherpkg
    otherpkg.call(costpkg.first)
    out["second"] = functions(second.close())
    second.stop()
    print(json.dumps(out))
    """
)


def _package(root: Path, name: str, source: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text(textwrap.dedent(source))


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> dict:
    require_torch()
    base = tmp_path_factory.mktemp("cost")
    root, other = base / "tree", base / "other"
    _package(
        root,
        "costpkg",
        """
        def first():
            return 1

        def hidden():
            return 2

        def after():
            return 3
        """,
    )
    _package(other, "otherpkg", "def call(function):\n    return function()\n")
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(root), str(other)],
        env={**os.environ, "TORCHTALK_CACHE_DIR": str(base / "cache")},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_code_object_is_named_once_then_handed_back_by_its_name(seen: dict) -> None:
    assert seen["first"] == ["costpkg/__init__.py:first"]
    # The next window hands back first's name from the compiled side, not its code object.
    assert seen["named_again"] == ["costpkg/__init__.py:first"]
    assert seen["unnamed_again"] == []


def test_names_belong_to_the_observer_of_their_tree(seen: dict) -> None:
    # costpkg is not the second observer's tree: its first() is no name there, though the
    # first observer had named it.
    assert seen["second"] == ["otherpkg/__init__.py:call"]


def test_quiet_work_is_not_observed_and_observation_resumes_after(seen: dict) -> None:
    assert seen["quiet"] == ["costpkg/__init__.py:after"]


def test_the_recorders_own_work_is_not_observed(seen: dict) -> None:
    # Draining (naming code objects, describing C functions) and writing a journal entry
    # run with the profile function suspended: of the recorder's methods, only those
    # entered before it goes quiet (the entry point) or after (the CUDA check, observed
    # as before) reach the next window.
    assert seen["own_after_close"] == ["Observer._cuda_allocated_since"]
    assert seen["own_journal"] == ["JournalWriter.test"]  # not _delta, _append, _write
