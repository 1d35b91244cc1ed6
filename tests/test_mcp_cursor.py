"""`torchtalk cursor-add`: merge into .cursor/mcp.json, never clobber, add the rules file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_torchtalk.cli import main


def _config(project: Path) -> dict:
    return json.loads((project / ".cursor" / "mcp.json").read_text())


def test_cursor_add_creates_config_and_rules(
    tmp_path: Path, minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    assert main(["cursor-add", "-C", str(project), "-p", str(minitorch_repo)]) == 0
    entry = _config(project)["mcpServers"]["torchtalk"]
    assert entry["args"] == ["mcp-serve", "--source", str(minitorch_repo.resolve())]
    assert Path(entry["command"]).name == "torchtalk"
    rules = (project / ".cursor" / "rules" / "torchtalk.mdc").read_text()
    assert rules.startswith("---\n") and "alwaysApply: true" in rules
    for tool in ("get_status", "trace", "search", "graph", "modules", "tests", "affected"):
        assert f"`{tool}(" in rules
    assert "added torchtalk" in capsys.readouterr().out


def test_cursor_add_keeps_other_servers_and_keys(tmp_path: Path, minitorch_repo: Path) -> None:
    project = tmp_path / "project"
    (project / ".cursor").mkdir(parents=True)
    existing = {
        "mcpServers": {
            "other": {"command": "other-server", "args": ["--flag"]},
            "torchtalk": {"command": "old", "args": []},
        },
        "someSetting": True,
    }
    (project / ".cursor" / "mcp.json").write_text(json.dumps(existing))
    assert (
        main(["cursor-add", "-C", str(project), "-p", str(minitorch_repo), "--harness", "pytorch"])
        == 0
    )
    config = _config(project)
    assert config["someSetting"] is True
    assert config["mcpServers"]["other"] == existing["mcpServers"]["other"]
    assert config["mcpServers"]["torchtalk"]["args"][-2:] == ["--harness", "pytorch"]
    # Running it again changes nothing.
    before = (project / ".cursor" / "mcp.json").read_bytes()
    assert (
        main(["cursor-add", "-C", str(project), "-p", str(minitorch_repo), "--harness", "pytorch"])
        == 0
    )
    assert (project / ".cursor" / "mcp.json").read_bytes() == before


@pytest.mark.parametrize(
    "content",
    ['{"mcpServers": {"other": ', "[1, 2]", '{"mcpServers": []}'],
)
def test_cursor_add_refuses_a_config_it_cannot_merge(
    tmp_path: Path, minitorch_repo: Path, content: str, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    (project / ".cursor").mkdir(parents=True)
    path = project / ".cursor" / "mcp.json"
    path.write_text(content)
    assert main(["cursor-add", "-C", str(project), "-p", str(minitorch_repo)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("torchtalk: error: ") and err.count("\n") == 1
    assert "left unchanged" in err
    assert path.read_text() == content
    assert not (project / ".cursor" / "rules").exists()
    assert [p.name for p in (project / ".cursor").iterdir()] == ["mcp.json"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-C", "/no/such/project"], "is not a directory"),
        (["-p", "/no/such/source"], "does not exist"),
        (["--harness", "nonesuch"], "unknown harness"),
    ],
)
def test_cursor_add_bad_input(
    tmp_path: Path,
    minitorch_repo: Path,
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    args = {"-C": str(project), "-p": str(minitorch_repo)}
    extra = []
    for flag, value in zip(argv[::2], argv[1::2], strict=True):
        if flag in args:
            args[flag] = value
        else:
            extra += [flag, value]
    assert main(["cursor-add", *[x for pair in args.items() for x in pair], *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (project / ".cursor").exists()
