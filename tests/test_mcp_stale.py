"""A fresh server knows it is stale (issue 37): started on an index the tree has moved past,
its first answer says so in its first line and get_status says "stale", without waiting
for the idle watcher's first comparison."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.workspace import Workspace
from mcp_server.state import ServerState
from mcp_server.tools import Tools


def test_a_fresh_server_says_stale_in_the_first_line_of_its_first_answer(
    minitorch_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_torchtalk.cli import main

    # the idle watcher never runs in this test: only the check before answering can tell
    monkeypatch.setattr("mcp_server.state.FRESHNESS_IDLE_S", 3600.0)
    assert main(["index", "build", "--source", str(minitorch_repo), "-q"]) == 0
    linalg = minitorch_repo / "minitorch/linalg.py"
    linalg.write_text(linalg.read_text().replace("def vector_norm(", "def vector_norm_v2("))
    state = ServerState(Workspace.resolve(minitorch_repo))
    tools = Tools(state)
    state.start()
    try:
        answer = tools.graph("minitorch.nn.functional.relu")
        assert not answer.is_error
        first = answer.content[0].text.splitlines()[0]
        assert first.startswith("STALE INDEX: the index may not match the tree"), first
        assert answer.structured_content["data"]["stale"] is True
        status = tools.get_status().structured_content
        assert status["title"].endswith(": stale"), status["title"]
        assert status["warnings"][0].startswith("STALE INDEX")
    finally:
        state.stop()


def test_a_fresh_server_on_a_matching_tree_answers_without_a_warning(
    minitorch_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_torchtalk.cli import main

    monkeypatch.setattr("mcp_server.state.FRESHNESS_IDLE_S", 3600.0)
    assert main(["index", "build", "--source", str(minitorch_repo), "-q"]) == 0
    state = ServerState(Workspace.resolve(minitorch_repo))
    tools = Tools(state)
    state.start()
    try:
        answer = tools.graph("minitorch.nn.functional.relu")
        assert "STALE" not in answer.content[0].text
        assert tools.get_status().structured_content["title"].endswith(": ready")
    finally:
        state.stop()
