"""The second reliability pass (issue 40): hostile YAML, TOML and configuration cost
what they weigh; MCP over stdio answers malformed messages; `mcp-serve` binds before it
says it serves. docs/reliability.md has the table."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tracemalloc
from pathlib import Path

import pytest

from indexer.bindings.yaml_entries import MAX_DEPTH, RegistryFormatError, read_entries
from tests.mcp_session import torchtalk_command
from tests.reliability_support import build, one_line_error, run

NATIVE = "aten/src/ATen/native/native_functions.yaml"
DERIVATIVES = "tools/autograd/derivatives.yaml"


def alias_bomb(levels: int, key: str = "func") -> str:
    """A registry of nested aliases: each level names the one before nine times, so
    ``levels`` levels expand to 9**levels values (8 levels: 316 bytes, 43 million)."""
    names = "abcdefghijklmnop"
    lines = ['- a: &a ["x","x","x","x","x","x","x","x","x"]']
    for level in range(1, levels):
        previous = ",".join([f"*{names[level - 1]}"] * 9)
        lines.append(f"- {names[level]}: &{names[level]} [{previous}]")
    lines.append(f"- {key}: *{names[levels - 1]}")
    return "\n".join(lines) + "\n"


# --- YAML alias bombs -----------------------------------------------------------------------


def test_yaml_aliases_are_expanded_within_the_files_allowance() -> None:
    """Measured by memory, not time: 6 levels (242 bytes, 531,441 values) took ~40 MB."""
    text = alias_bomb(6)
    tracemalloc.start()
    try:
        with pytest.raises(RegistryFormatError, match="YAML aliases expand past 10,000 values"):
            read_entries(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 5 * 1024**2, peak


def test_yaml_nested_deeper_than_any_registry_is_refused() -> None:
    """libyaml refuses 1,000 levels itself; a registry has 4."""
    deep = "- func: " + "[" * 500 + "]" * 500 + "\n"
    with pytest.raises(RegistryFormatError, match=f"nested deeper than {MAX_DEPTH} levels"):
        read_entries(deep)


def test_plain_yaml_with_aliases_still_reads() -> None:
    text = '- func: &f "add(Tensor self) -> Tensor"\n  variants: [function]\n- func: *f\n'
    assert [entry.data["func"] for entry in read_entries(text)] == [
        "add(Tensor self) -> Tensor"
    ] * 2


@pytest.mark.slow
@pytest.mark.parametrize("registry", [NATIVE, DERIVATIVES], ids=["native_functions", "derivatives"])
def test_an_alias_bomb_registry_is_a_file_problem_not_a_hang(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str], registry: str
) -> None:
    """8 levels (316 bytes): `index build` took 14 s and 886 MB; it is refused at once
    and reported with the reason (the memory is measured by the test above)."""
    (minitorch_repo / registry).write_text(alias_bomb(8), encoding="utf-8")
    code, _, err = build(minitorch_repo, capsys)
    assert code == 0, err
    code, out, _ = run(capsys, "status", "--source", str(minitorch_repo))
    assert "YAML aliases expand past" in out


# --- TOML and the configuration --------------------------------------------------------------

DEEP_TOML = "x = " + "[" * 5000 + "]" * 5000 + "\n"


def test_a_manifest_nested_5000_deep_is_one_line(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (minitorch_repo / ".torchtalk.toml").write_text(DEEP_TOML, encoding="utf-8")
    code, _, err = run(capsys, "status", "--source", str(minitorch_repo))
    assert code == 2 and one_line_error(err), err[-300:]
    assert ".torchtalk.toml: invalid TOML: nested too deep" in err


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (DEEP_TOML, "invalid configuration: nested too deep"),
        ("source = 5\n", "source must be a string (got int)"),
        ('harness = ["a"]\n', "harness must be a string (got list)"),
        ('[harnesses]\n"/x" = 5\n', "[harnesses] must map source paths to harness names"),
    ],
    ids=["deep", "source-int", "harness-list", "harnesses-int"],
)
def test_a_config_of_the_wrong_shape_is_one_line(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str], config: str, message: str
) -> None:
    path = Path(os.environ["TORCHTALK_CONFIG_DIR"]) / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(config, encoding="utf-8")
    code, _, err = run(capsys, "status", "--source", str(minitorch_repo))
    assert code == 2 and one_line_error(err), err[-300:]
    assert message in err


# --- MCP -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_mcp_stdio_answers_malformed_messages(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Over HTTP the same lines get these errors; over stdio they got nothing and the
    client waited for ever."""
    assert build(minitorch_repo, capsys)[0] == 0
    lines = [
        "not json",
        json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": "notadict"}),
        "[1, 2]",
        json.dumps({"jsonrpc": "2.0", "method": "notifications/x", "params": "notadict"}),
        json.dumps({"jsonrpc": "2.0", "id": 8, "method": "ping"}),
    ]
    done = subprocess.run(
        [*torchtalk_command(), "mcp-serve", "--source", str(minitorch_repo)],
        input="".join(line + "\n" for line in lines),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(a.get("id"), a.get("error", {}).get("code")) for a in answers] == [
        (None, -32700),
        (7, -32602),
        (None, -32600),
        (8, None),  # the notification gets no answer; the session goes on
    ], done.stdout + done.stderr[-2000:]


@pytest.mark.slow
def test_mcp_serve_on_a_busy_port_fails_before_it_says_it_serves(minitorch_repo: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(
            [
                *torchtalk_command(), "mcp-serve", "--source", str(minitorch_repo),
                "--transport", "streamable-http", "--port", str(port),
            ],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert done.returncode == 2 and one_line_error(done.stderr), done.stderr[-2000:]
    assert f"cannot serve on 127.0.0.1:{port}: Address already in use" in done.stderr
    assert "serving" not in done.stderr


def test_deeply_nested_derived_data_reads_as_a_miss() -> None:
    """The chains to the hub are JSON a selection reads from the index; one nested
    100,000 deep (crafted, or damaged) was a RecursionError in every selection, where any
    other unreadable cache is a miss."""
    import sqlite3

    from indexer.select import hub_chains
    from indexer.store import derived

    deep = "[" * 100_000 + "]" * 100_000
    conn = sqlite3.connect(":memory:")
    derived.ensure(conn)
    conn.execute("INSERT INTO derived VALUES (?, ?, ?)", (hub_chains.NAME, "key", deep))
    assert derived.header(conn, hub_chains.NAME, "key") is None
