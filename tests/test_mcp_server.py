"""`torchtalk mcp-serve` as agents run it: a subprocess over stdio, the SDK's real client."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import anyio
import pytest
from mcp.client import Client

from indexer.workspace import Workspace
from mcp_server.state import QUICK_FILE
from pytest_torchtalk.cli import main
from tests.helpers import line_of
from tests.mcp_session import stdio_session, text_of, torchtalk_command
from tests.select_support import forget_derived

SEVEN = ["get_status", "trace", "search", "graph", "modules", "tests", "affected"]
BUILD_STEPS = ["discover", "extract", "link", "done"]


async def _poll_until_ready(client: Client, timeout: float = 120) -> list[dict]:
    """get_status from the first moment until every component is ready."""
    seen = []
    deadline = time.monotonic() + timeout
    while True:
        result = await client.call_tool("get_status", {})
        assert not result.is_error, text_of(result)
        seen.append(result.structured_content["data"])
        if seen[-1]["ready"] or time.monotonic() > deadline:
            return seen
        await anyio.sleep(0.05)


def test_stdio_server_builds_in_phases_then_answers(minitorch_repo: Path) -> None:
    workspace = Workspace.resolve(minitorch_repo)
    assert not workspace.db_path.exists()
    binary_ops = minitorch_repo / "aten/src/ATen/native/BinaryOps.cpp"

    async def scenario() -> None:
        async with stdio_session(minitorch_repo) as client:
            statuses = await _poll_until_ready(client)
            final = statuses[-1]
            assert final["ready"], final
            assert final["components"] == dict.fromkeys(
                ["yaml", "bindings", "python", "tests", "cpp"], "ready"
            )
            # The build went through both phases, each step once, in order, and says when.
            steps = [(phase["build"], phase["step"]) for phase in final["phases"]]
            assert steps == [("quick", s) for s in BUILD_STEPS] + [("full", s) for s in BUILD_STEPS]
            times = [phase["at_s"] for phase in final["phases"]]
            assert times == sorted(times)
            # Every status seen before the end was honest about what was missing.
            for status in statuses[:-1]:
                assert not status["ready"]
                assert status["components"]["cpp"] != "ready"
            assert final["serving"] == "full"
            assert final["index"]["build_phase"] == "full"

            listed = await client.list_tools()
            assert [tool.name for tool in listed.tools] == SEVEN
            for tool in listed.tools:
                assert tool.annotations.read_only_hint is True, tool.name
                assert tool.annotations.destructive_hint is False, tool.name
                assert tool.description and len(tool.description) > 80, tool.name
                assert {"title", "items", "notes"} <= set(tool.output_schema["properties"])

            result = await client.call_tool("graph", {"func": "check_add_alpha"})
            assert not result.is_error, text_of(result)
            call_site = f"aten/src/ATen/native/BinaryOps.cpp:{line_of(binary_ops, 'check_add_alpha(*this, alpha)')}"
            first = result.structured_content["items"][0]
            assert first["label"] == "at::native::structured_add_out::impl"
            assert first["evidence"] == call_site
            assert f"at::native::structured_add_out::impl [cpp_function, calls] @ {call_site}" in (
                text_of(result)
            )

    anyio.run(scenario)
    assert workspace.db_path.is_file()
    assert not workspace.db_path.with_name(QUICK_FILE).exists()


def test_tool_schemas(minitorch_repo: Path) -> None:
    async def scenario() -> dict:
        async with stdio_session(minitorch_repo, mode="legacy") as client:
            assert client.protocol_version.startswith("2025")
            return {tool.name: tool.input_schema for tool in (await client.list_tools()).tools}

    schemas = anyio.run(scenario)
    assert list(schemas) == SEVEN
    assert schemas["get_status"]["properties"] == {}
    graph = schemas["graph"]
    assert graph["required"] == ["func"]
    assert set(graph["properties"]) == {
        "func",
        "mode",
        "depth",
        "fuzzy_all_levels",
        "walk_python",
        "focus",
    }
    assert graph["properties"]["mode"]["enum"] == ["callers", "calls", "impact"]
    assert schemas["trace"]["required"] == ["func"]
    assert set(schemas["trace"]["properties"]) == {"func", "focus", "limit"}
    assert set(schemas["search"]["properties"]) == {"query", "mode", "backend", "limit"}
    assert set(schemas["modules"]["properties"]) == {"name", "mode", "focus"}
    assert set(schemas["tests"]["properties"]) == {"query", "mode", "limit", "focus"}
    assert "required" not in schemas["tests"]
    # limit (issue 22): how many ranked test files affected lists, as tests' limit does.
    assert set(schemas["affected"]["properties"]) == {"funcs", "depth", "limit"}
    assert schemas["affected"]["required"] == ["funcs"]


BAD_CALLS = [
    ("graph", {"func": "check_add_alpha", "depth": 0}, "depth"),
    ("graph", {"func": "check_add_alpha", "depth": 11}, "depth"),
    ("graph", {"func": "check_add_alpha", "mode": "sideways"}, "mode"),
    ("graph", {}, "func"),
    ("graph", {"func": ""}, "func"),
    ("graph", {"func": "check_add_alpha", "focus": "no/such/dir"}, "focus"),
    ("graph", {"func": "check_add_alpha", "walk_python": "perhaps"}, "walk_python"),
    ("tests", {"limit": 0}, "limit"),
    ("search", {"query": "add", "mode": "everything"}, "mode"),
    ("affected", {"funcs": []}, "funcs"),
    ("affected", {"funcs": " , "}, "funcs"),
    ("affected", {"funcs": "check_add_alpha", "limit": 0}, "limit"),
    ("nonexistent_tool", {}, "nonexistent_tool"),
]


def test_bad_arguments_are_tool_errors_not_crashes(minitorch_repo: Path) -> None:
    assert main(["index", "build", "--source", str(minitorch_repo), "-q"]) == 0

    async def scenario() -> list[tuple[str, bool, str]]:
        outcomes = []
        async with stdio_session(minitorch_repo) as client:
            for name, arguments, _ in BAD_CALLS:
                result = await client.call_tool(name, arguments)
                outcomes.append((name, result.is_error, text_of(result)))
            # The server is still there and still answers.
            status = await client.call_tool("get_status", {})
            assert not status.is_error and status.structured_content["data"]["ready"]
        return outcomes

    for (name, is_error, text), (_, arguments, word) in zip(
        anyio.run(scenario), BAD_CALLS, strict=True
    ):
        assert is_error, (name, arguments, text)
        assert word in text, (name, arguments, text)
        assert "\n" not in text.strip(), text  # one line, for the model to read
        assert "errors.pydantic.dev" not in text


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_streamable_http_transport(minitorch_repo: Path) -> None:
    assert main(["index", "build", "--source", str(minitorch_repo), "-q"]) == 0
    port = _free_port()
    process = subprocess.Popen(
        [
            *torchtalk_command(),
            "mcp-serve",
            "--source",
            str(minitorch_repo),
            "--transport",
            "streamable-http",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None, process.stderr.read().decode()
                assert time.monotonic() < deadline, "server did not listen"
                time.sleep(0.1)

        async def scenario() -> tuple[list[str], str]:
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                names = [tool.name for tool in (await client.list_tools()).tools]
                result = await client.call_tool("graph", {"func": "check_add_alpha"})
                return names, text_of(result)

        names, text = anyio.run(scenario)
        assert names == SEVEN
        assert "at::native::structured_add_out::impl" in text
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--source", "/no/such/tree"], "does not exist"),
        (["--port", "0"], "--port"),
        (["--jobs", "0"], "--jobs"),
    ],
)
def test_mcp_serve_bad_flags_are_one_line_errors(
    minitorch_repo: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["mcp-serve", "--source", str(minitorch_repo), *argv]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("torchtalk: error: ") and message in err
    assert err.count("\n") == 1


def _evidence(result) -> list[tuple[str, str | None]]:
    return [(item["label"], item["evidence"]) for item in result.structured_content["items"]]


def test_every_tool_answers_a_fixture_query_with_file_and_line(minitorch_repo: Path) -> None:
    assert main(["index", "build", "--source", str(minitorch_repo), "-q"]) == 0

    def at(path: str, text: str) -> str:
        return f"{path}:{line_of(minitorch_repo / path, text)}"

    calls = {
        "trace": {"func": "minitorch.add"},
        "search": {"query": "fused_gelu"},
        "graph": {"func": "at::native::cpublas::gemm", "mode": "impact", "depth": 2},
        "modules": {"name": "minitorch.nn.Linear"},
        "tests": {"query": "relu"},
        "affected": {"funcs": "check_add_alpha"},
        "get_status": {},
    }

    async def scenario() -> dict:
        answers = {}
        async with stdio_session(minitorch_repo) as client:
            for name, arguments in calls.items():
                result = await client.call_tool(name, arguments)
                assert not result.is_error, (name, text_of(result))
                assert text_of(result).splitlines()[0] == result.structured_content["title"]
                answers[name] = result
        return answers

    answers = anyio.run(scenario)
    native = "aten/src/ATen/native"
    assert (
        "CPU, CUDA: at::native::structured_add_out::impl",
        at(f"{native}/BinaryOps.cpp", "TORCH_IMPL_FUNC(add_out)"),
    ) in _evidence(answers["trace"])
    assert (
        "minitorch::fused_gelu",
        at("minitorch/csrc/custom_ops.cpp", 'lib.def("fused_gelu('),
    ) in _evidence(answers["search"])
    assert (
        "at::native::addmm_impl_cpu_",
        at(f"{native}/LinearAlgebra.cpp", "cpublas::gemm("),
    ) in _evidence(answers["graph"])
    assert (
        answers["modules"]
        .structured_content["title"]
        .endswith("@ " + at("minitorch/nn/modules/linear.py", "class Linear(Module)"))
    )
    assert (
        "forward(self, input)",
        at("minitorch/nn/modules/linear.py", "def forward("),
    ) in _evidence(answers["modules"])
    assert (
        "test/test_nn.py::test_functional_relu",
        at("test/test_nn.py", "def test_functional_relu("),
    ) in _evidence(answers["tests"])
    affected = _evidence(answers["affected"])
    # A file's line cites its most direct test (issue 22: ranked as tests ranks them): the
    # test named for the op check_add_alpha serves (issue 37: test_add_alpha, before the
    # OpInfo harness test); the call site linking it to the change is its chain's last hop.
    assert (
        "test/test_binary_ufuncs.py",
        at("test/test_binary_ufuncs.py", "def test_add_alpha("),
    ) in affected
    assert any(
        evidence == at("test/test_binary_ufuncs.py", "minitorch.add(") for _, evidence in affected
    )
    assert any(
        evidence == at(f"{native}/BinaryOps.cpp", "check_add_alpha(*this, alpha)")
        for _, evidence in affected
    )
    status = answers["get_status"].structured_content
    assert status["data"]["ready"] and status["data"]["serving"] == "full"


def test_a_session_of_every_tool_leaves_the_index_folder_as_it_was(minitorch_repo: Path) -> None:
    """The tools are declared read-only, and are: nothing in or beside the index is
    written, not even what a walk derives (kept by index maintenance only,
    docs/selection.md)."""
    assert main(["index", "build", "--source", str(minitorch_repo), "-q"]) == 0
    workspace = Workspace.resolve(minitorch_repo)
    folder = workspace.db_path.parent
    # What the build derived into the index, forgotten: the walks redo it in memory.
    forget_derived(workspace, "adjacency", "hub", "hub_chains", "judgments", "prepared")

    def files() -> dict[str, tuple[bytes, int]]:
        return {
            path.name: (path.read_bytes(), path.stat().st_mtime_ns)
            for path in sorted(folder.iterdir())
            if path.is_file()
        }

    before = files()
    calls = [
        ("get_status", {}),
        ("trace", {"func": "minitorch.add"}),
        ("search", {"query": "fused_gelu"}),
        ("graph", {"func": "at::native::cpublas::gemm", "mode": "impact", "depth": 2}),
        ("modules", {"name": "minitorch.nn.Linear"}),
        ("tests", {"query": "relu"}),
        ("affected", {"funcs": "check_add_alpha"}),
        ("affected", {"funcs": "minitorch.ops._OpNamespace.__init__"}),
    ]

    async def scenario() -> None:
        async with stdio_session(minitorch_repo) as client:
            for name, arguments in calls:
                result = await client.call_tool(name, arguments)
                assert not result.is_error, (name, text_of(result))
            await anyio.sleep(2.5)  # idle: the server loads what queries read (warm)
            assert not (await client.call_tool("get_status", {})).is_error

    anyio.run(scenario)
    assert sorted({name for name, _ in calls}) == sorted(SEVEN)
    assert files() == before
