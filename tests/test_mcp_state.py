"""The served index while it builds: quick parts first, honest answers, safe concurrent swaps.

The full build is held at a gate so the in-between state can be observed on a fixture
that would otherwise build in a fraction of a second.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from mcp.server.mcpserver.exceptions import ToolError

from indexer.workspace import Workspace
from mcp_server.state import QUICK_FILE, ServerState, git_head
from mcp_server.tools import Tools, _query
from tests.helpers import commit_all, git, line_of


def _data(result) -> dict:
    assert not result.is_error
    return result.structured_content


def test_quick_index_is_served_while_the_call_graph_builds(minitorch_repo: Path) -> None:
    gate = threading.Event()
    workspace = Workspace.resolve(minitorch_repo)
    state = ServerState(workspace, before_full_build=gate.wait)
    tools = Tools(state)
    state.start()
    try:
        state.index(wait=60)  # the quick phase is served
        readiness = state.readiness()
        assert readiness == {
            "yaml": "ready",
            "bindings": "partial",
            "python": "ready",
            "tests": "ready",
            "cpp": "building",
        }
        assert workspace.db_path.with_name(QUICK_FILE).is_file()
        assert not workspace.db_path.exists()  # nothing else ever sees a partial index

        status = _data(tools.get_status())
        assert status["data"]["serving"] == "quick"
        assert not status["data"]["ready"]
        assert "building" in status["title"]

        # Python is ready: Python callers are answered, with a note that C++ is not.
        activation = minitorch_repo / "minitorch/nn/modules/activation.py"
        answer = _data(tools.graph("minitorch.nn.functional.relu"))
        assert answer["notes"][0].startswith("incomplete: cpp building")
        assert answer["data"]["incomplete"] == ["cpp", "bindings"]
        assert {
            "label": "minitorch.nn.modules.activation.ReLU.forward",
            "evidence": f"minitorch/nn/modules/activation.py:{line_of(activation, 'F.relu(')}",
        }.items() <= answer["items"][0].items()

        # A C++ function outside the registration files is not there yet, and it says why.
        missing = _data(tools.graph("check_add_alpha"))
        assert not missing["found"]
        assert any("incomplete: cpp building" in note for note in missing["notes"])

        # Test selection on an incomplete graph would under-select: refused, not guessed.
        with pytest.raises(ToolError, match="affected needs the complete index"):
            tools.affected(["at::native::add_kernel"])

        # Requests keep coming while the full build runs and the index is swapped.
        errors: list[BaseException] = []
        stop = threading.Event()

        def hammer() -> None:
            while not stop.is_set():
                try:
                    tools.graph("minitorch.nn.functional.relu", mode="impact")
                    tools.get_status()
                except BaseException as exc:
                    errors.append(exc)
                    return

        workers = [threading.Thread(target=hammer) for _ in range(4)]
        for worker in workers:
            worker.start()
        gate.set()
        assert state.wait_until_idle(120)
        stop.set()
        for worker in workers:
            worker.join(30)
        assert errors == []
    finally:
        gate.set()
        state.stop()

    assert state.readiness() == dict.fromkeys(state.readiness(), "ready")
    assert workspace.db_path.is_file()
    assert not workspace.db_path.with_name(QUICK_FILE).exists()
    binary_ops = minitorch_repo / "aten/src/ATen/native/BinaryOps.cpp"
    found = _data(tools.graph("check_add_alpha"))
    assert found["notes"] == []
    assert found["items"][0]["evidence"] == (
        f"aten/src/ATen/native/BinaryOps.cpp:{line_of(binary_ops, 'check_add_alpha(*this, alpha)')}"
    )
    phases = [(p["build"], p["step"]) for p in _data(tools.get_status())["data"]["phases"]]
    assert phases.index(("full", "held")) < phases.index(("full", "discover"))


def test_a_cached_index_is_served_without_building(minitorch_repo: Path) -> None:
    from pytest_torchtalk.cli import main

    assert main(["index", "build", "--source", str(minitorch_repo), "-q"]) == 0
    state = ServerState(Workspace.resolve(minitorch_repo))
    state.start()
    assert state.readiness() == dict.fromkeys(state.readiness(), "ready")
    assert state.snapshot()["phases"] == []  # nothing was built
    assert not state.snapshot()["building"]
    assert _data(Tools(state).get_status())["data"]["ready"]


def test_a_rebuilt_index_is_picked_up(minitorch_repo: Path) -> None:
    """`torchtalk index build` renames a new file into place: the next request uses it."""
    from pytest_torchtalk.cli import main

    assert main(["index", "build", "--source", str(minitorch_repo), "-q"]) == 0
    state = ServerState(Workspace.resolve(minitorch_repo))
    state.start()
    before = state.index()
    assert state.index() is before
    assert main(["index", "build", "--source", str(minitorch_repo), "-q", "--force"]) == 0
    assert state.index() is not before


def test_stopping_cancels_the_build_and_leaves_no_partial_file(minitorch_repo: Path) -> None:
    gate = threading.Event()
    workspace = Workspace.resolve(minitorch_repo)
    state = ServerState(workspace, before_full_build=gate.wait)
    state.start()
    state.index(wait=60)
    state._cancel.set()  # what stop() does first; the build is parked at the gate
    gate.set()
    state.stop()
    assert not state.snapshot()["building"]
    assert not workspace.db_path.exists()
    assert list(workspace.db_path.parent.glob("*.building-*")) == []


def test_a_missing_query_module_is_a_clear_tool_error() -> None:
    with pytest.raises(ToolError, match=r"nothing is not available in this build"):
        _query("no_such_query_module", "run", "nothing")


def test_sdk_preload_defers_only_the_sdk_models() -> None:
    """The start-up shortcut: the SDK's models build on first use; ours as usual."""
    import subprocess
    import sys

    code = (
        "from mcp_server.sdk import preload; preload()\n"
        "from pydantic._internal._config import config_defaults\n"
        "assert config_defaults['defer_build'] is False, config_defaults['defer_build']\n"
        "import mcp_types\n"
        "assert not mcp_types.CallToolResult.__pydantic_complete__\n"
        "result = mcp_types.CallToolResult.model_validate({'content': []})\n"
        "assert result.is_error is False and mcp_types.CallToolResult.__pydantic_complete__\n"
        "from mcp_server.tools import AnswerOut\n"
        "assert AnswerOut.__pydantic_complete__\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_full_index_built_meanwhile_is_served_instead_of_rebuilt(minitorch_repo: Path) -> None:
    from pytest_torchtalk.cli import main

    gate = threading.Event()
    workspace = Workspace.resolve(minitorch_repo)
    state = ServerState(workspace, before_full_build=gate.wait)
    state.start()
    try:
        state.index(wait=60)
        assert main(["index", "build", "--source", str(minitorch_repo), "-q"]) == 0
        gate.set()
        assert state.wait_until_idle(60)
    finally:
        gate.set()
        state.stop()
    steps = [(p["build"], p["step"]) for p in state.snapshot()["phases"]]
    assert ("full", "discover") not in steps
    assert state.readiness() == dict.fromkeys(state.readiness(), "ready")
    assert state.index().db_path == workspace.db_path


def test_an_unreadable_index_is_reported_and_rebuilt(minitorch_repo: Path) -> None:
    """Treated as no index (docs/reliability.md): never served, rebuilt, and status says
    why meanwhile."""
    workspace = Workspace.resolve(minitorch_repo)
    workspace.db_path.parent.mkdir(parents=True)
    workspace.db_path.write_bytes(b"not a database at all" * 100)
    gate = threading.Event()
    state = ServerState(workspace, before_full_build=gate.wait)
    state.start()
    tools = Tools(state)
    try:
        status = _data(tools.get_status())
        assert not status["data"]["ready"]
        phases = [phase["step"] for phase in status["data"]["phases"]]
        assert any("cannot be read" in p and "not a TorchTalk index" in p for p in phases)
    finally:
        gate.set()
    assert state.wait_until_idle(120)
    assert not tools.graph("gemm").is_error


def test_start_up_pauses_the_collector_and_freezes_what_it_built() -> None:
    """The other start-up shortcut: no cyclic collection while the SDK is imported."""
    import subprocess
    import sys

    code = (
        "import gc\n"
        "from mcp_server.sdk import preload, start_up\n"
        "with start_up():\n"
        "    assert not gc.isenabled()\n"
        "    preload()\n"
        "assert gc.isenabled()\n"
        "assert gc.get_freeze_count() > 100_000, gc.get_freeze_count()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_status_says_when_the_tree_moved_past_the_index(minitorch_repo: Path) -> None:
    """HEAD is read in the background (git rev-parse); a newer commit is pointed out."""
    from pytest_torchtalk.cli import main

    assert main(["index", "build", "--source", str(minitorch_repo), "-q"]) == 0
    built_at = git(minitorch_repo, "rev-parse", "HEAD").strip()
    (minitorch_repo / "NOTES.md").write_text("later\n")
    head = commit_all(minitorch_repo, "a later commit")
    assert git_head(minitorch_repo / "minitorch") == head != built_at  # from a subdirectory
    state = ServerState(Workspace.resolve(minitorch_repo))
    state.start()
    deadline = time.monotonic() + 30
    while state.snapshot()["head_commit"] is None and time.monotonic() < deadline:
        time.sleep(0.05)
    notes = _data(Tools(state).get_status())["notes"]
    assert any(f"at commit {head[:12]}" in note and built_at[:12] in note for note in notes)


def test_answers_say_when_the_tree_no_longer_matches_the_index(
    minitorch_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An edit after the build (same commit): the server finds it when idle and every
    answer says the index may not match, until the tree matches again."""
    from pytest_torchtalk.cli import main

    monkeypatch.setattr("mcp_server.state.WARM_IDLE_S", 0.1)
    monkeypatch.setattr("mcp_server.state.FRESHNESS_EVERY_S", 0.1)
    monkeypatch.setattr("mcp_server.state.FRESHNESS_IDLE_S", 0.1)
    assert main(["index", "build", "--source", str(minitorch_repo), "-q"]) == 0
    state = ServerState(Workspace.resolve(minitorch_repo))
    tools = Tools(state)
    state.start()

    def wait_for(stale: bool) -> None:
        deadline = time.monotonic() + 30
        while (state.stale_note() is not None) != stale or state._freshness is None:
            assert time.monotonic() < deadline, state.stale_note()
            time.sleep(0.05)

    try:
        state.index()
        wait_for(stale=False)
        assert _data(tools.get_status())["title"].endswith(": ready")
        linalg = minitorch_repo / "minitorch/linalg.py"
        original = linalg.read_text()
        linalg.write_text(original.replace("def vector_norm(", "def vector_norm_v2("))
        wait_for(stale=True)
        status = _data(tools.get_status())
        assert status["title"].endswith(": stale")
        assert status["data"]["stale"] is True
        assert (
            "1 changed file differs from the index (minitorch/linalg.py)" in status["warnings"][0]
        )
        answer = _data(tools.graph("minitorch.nn.functional.relu"))
        assert answer["warnings"][0].startswith("STALE INDEX: the index may not match the tree")
        assert "torchtalk index update" in answer["warnings"][0]
        linalg.write_text(original)
        wait_for(stale=False)
        assert "stale" not in _data(tools.graph("minitorch.nn.functional.relu"))["data"]
    finally:
        state.stop()


def test_git_head_of_a_directory_outside_any_repository(tmp_path: Path) -> None:
    assert git_head(tmp_path) is None


def test_the_name_list_and_edges_load_only_once_the_server_is_idle(
    minitorch_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loading every name, and every edge into memory, holds the interpreter: it waits
    for a pause between requests."""
    from indexer.query import adjacency
    from indexer.store.derived import index_key
    from pytest_torchtalk.cli import main

    monkeypatch.setattr("mcp_server.state.WARM_IDLE_S", 0.2)
    assert main(["index", "build", "--source", str(minitorch_repo), "-q"]) == 0
    monkeypatch.setattr(adjacency, "_loaded", {})  # the server is another process than the build
    state = ServerState(Workspace.resolve(minitorch_repo))
    state.start()
    try:
        with state.serving():
            index = state.index()
            time.sleep(0.6)
            assert "_all_names_lower" not in vars(index)  # busy: not loaded yet
            assert adjacency.held(index.db_path, index.meta) is None
        deadline = time.monotonic() + 10
        while "_all_names_lower" not in vars(index) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "_all_names_lower" in vars(index)
        while adjacency.held(index.db_path, index.meta) is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # read from the index, where the build kept it
        assert adjacency.read(index.conn, index_key(index.meta)) is not None
    finally:
        state.stop()


def test_status_says_when_the_idle_load_is_done(
    minitorch_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """get_status's ``warmed``: false while the server is busy, true once the lookup
    tables are loaded, so a client (bench/mcp_answers.py) can tell when answers stop
    paying for them."""
    from pytest_torchtalk.cli import main

    monkeypatch.setattr("mcp_server.state.WARM_IDLE_S", 0.2)
    assert main(["index", "build", "--source", str(minitorch_repo), "-q"]) == 0
    state = ServerState(Workspace.resolve(minitorch_repo))
    state.start()
    try:
        with state.serving():
            state.index()
            time.sleep(0.6)
            assert state.snapshot()["warmed"] is False  # busy: not loaded yet
        deadline = time.monotonic() + 20
        while not state.snapshot()["warmed"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert "_all_names_lower" in vars(state.index())
        # what tests and affected read first: loaded, not paid by the first of them
        assert "test-file-paths" in state.index()._shared
        status = _data(Tools(state).get_status())
        assert status["data"]["warmed"] is True
    finally:
        state.stop()


def test_a_failed_idle_load_is_said_on_stderr(
    minitorch_repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Idle loading is a head start: when it fails the server says so and requests read
    SQLite, rather than the failure passing unnoticed."""
    from indexer.query import adjacency
    from indexer.query.index import Index
    from mcp_server.state import _warm
    from pytest_torchtalk.cli import main

    assert main(["index", "build", "--source", str(minitorch_repo), "-q"]) == 0
    monkeypatch.setattr(adjacency, "_loaded", {})  # the server is another process than the build
    index = Index(Workspace.resolve(minitorch_repo).db_path)

    def broken(*_):
        raise OSError("disk gone")

    monkeypatch.setattr(adjacency, "shared", broken)
    _warm(index, full=True)
    assert "loading the edges failed (disk gone); queries read SQLite" in capsys.readouterr().err
    assert "_all_names_lower" in vars(index)  # the name list still loaded
    assert adjacency.held(index.db_path, index.meta) is None


SETTLE_CHECK = """
import gc, sys, time, weakref
import mcp_server.state as server_state
from mcp_server import heap
from indexer.workspace import Workspace

server_state.WARM_IDLE_S = 0.1
settles = []
settle = heap.settle
heap.settle = lambda: settles.append(gc.get_freeze_count()) or settle()
state = server_state.ServerState(Workspace.resolve(sys.argv[1]))
state.start()


def wait_for(done):
    deadline = time.monotonic() + 20
    while not done():
        assert time.monotonic() < deadline, settles
        time.sleep(0.02)


class Cycle:
    def __init__(self):
        self.me = self


with state.serving():
    index = state.index()
wait_for(lambda: len(settles) == 1)  # warmed, then settled once
time.sleep(0.5)
assert len(settles) == 1, settles  # no request since: nothing to settle
with state.serving():
    kept = [[n] for n in range(50_000)]  # a cache a request built
    garbage = Cycle()
    gone = weakref.ref(garbage)
    del garbage
wait_for(lambda: len(settles) == 2)
time.sleep(0.1)
assert gone() is None  # the cycle the request left was collected, not frozen
assert gc.get_freeze_count() >= settles[1] + 50_000, (gc.get_freeze_count(), settles)
# Every FULL_EVERY_S a settle collects the frozen too: a cycle made of frozen objects is freed.
later = Cycle()
gone = weakref.ref(later)
gc.freeze()  # as if a settle had frozen it
del later
heap.FULL_EVERY_S = 0.0
with state.serving():
    pass
wait_for(lambda: len(settles) == 3)
time.sleep(0.1)
assert gone() is None
heap.FULL_EVERY_S = 600.0
# Another index served (the file replaced): everything frozen goes back to the collector.
state._index_inode = -1
assert state.index() is not index
assert gc.get_freeze_count() == 0
wait_for(lambda: len(settles) == 4)  # and the new index settles in turn
state.stop()
"""


def test_the_heap_is_settled_when_idle_after_requests_and_released_for_a_new_index(
    minitorch_repo: Path,
) -> None:
    """Long-lived objects that requests leave (an index's caches) are collected and frozen
    once the server is idle, so the full collections that fall inside later requests do
    not walk them (mcp_server.heap); a replaced index's frozen caches are released."""
    import subprocess
    import sys

    from pytest_torchtalk.cli import main

    assert main(["index", "build", "--source", str(minitorch_repo), "-q"]) == 0
    done = subprocess.run(
        [sys.executable, "-c", SETTLE_CHECK, str(minitorch_repo)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def test_status_says_what_the_idle_load_failed_to_load(
    minitorch_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warm-up whose edges could not be loaded is not ``warmed``: get_status says what
    failed and why (issue 37), rather than a warm server that is not."""
    from indexer.query import adjacency
    from pytest_torchtalk.cli import main

    monkeypatch.setattr("mcp_server.state.WARM_IDLE_S", 0.2)
    assert main(["index", "build", "--source", str(minitorch_repo), "-q"]) == 0
    monkeypatch.setattr(adjacency, "_loaded", {})  # the server is another process than the build

    def broken(*_):
        raise OSError("disk gone")

    monkeypatch.setattr(adjacency, "shared", broken)
    state = ServerState(Workspace.resolve(minitorch_repo))
    state.start()
    try:
        state.index()
        deadline = time.monotonic() + 20
        while not state.snapshot()["warm_failed"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        status = _data(Tools(state).get_status())
        assert status["data"]["warmed"] is False
        assert status["data"]["warm_failed"] == ["the edges (OSError: disk gone)"]
        assert any(
            "not warmed: loading the edges (OSError: disk gone) failed" in note
            for note in status["notes"]
        ), status["notes"]
    finally:
        state.stop()
