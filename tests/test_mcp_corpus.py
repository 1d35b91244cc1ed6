"""The MCP server on the real PyTorch index, over stdio, as an agent would ask."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.helpers import line_of
from tests.mcp_session import stdio_session, text_of

pytestmark = pytest.mark.corpus

QUESTIONS = [
    ("status", "get_status", {}),
    ("callers", "graph", {"func": "_matmul_impl"}),
    ("trace", "trace", {"func": "torch.matmul", "focus": "dispatch"}),
    ("modules", "modules", {"name": "torch.nn.Linear"}),
    ("missing", "graph", {"func": "at::native::no_such_kernel_anywhere"}),
    ("impact", "graph", {"func": "_matmul_impl", "mode": "impact", "depth": 2}),
    (
        "fuzzy",
        "graph",
        {"func": "_matmul_impl", "mode": "impact", "depth": 2, "fuzzy_all_levels": True},
    ),
]


def ask_pytorch(source: Path) -> dict[str, dict]:
    """Each question's structured answer, over stdio with the handshake clients use."""

    async def scenario() -> dict[str, dict]:
        answers = {}
        async with stdio_session(source, mode="legacy") as client:
            for key, tool, arguments in QUESTIONS:
                result = await client.call_tool(tool, arguments)
                assert not result.is_error, (key, text_of(result))
                answers[key] = result.structured_content
        return answers

    return anyio.run(scenario)


def test_pytorch_answers_with_file_and_line(
    pytorch_index: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    source, cache = pytorch_index
    monkeypatch.setenv("TORCHTALK_CACHE_DIR", str(cache))
    answers = ask_pytorch(source)
    linear_algebra = "aten/src/ATen/native/LinearAlgebra.cpp"

    def at(path: str, text: str) -> str:
        return f"{path}:{line_of(source / path, text)}"

    assert answers["status"]["data"]["ready"]
    assert answers["status"]["data"]["serving"] == "full"
    callers = {item["label"]: item["evidence"] for item in answers["callers"]["items"]}
    assert callers["at::native::matmul"] == at(
        linear_algebra, "result = at::native::_matmul_impl(unused"
    )
    kernels = {item["evidence"] for item in answers["trace"]["items"]}
    assert at(linear_algebra, "Tensor matmul(const Tensor & tensor1") in kernels
    linear = at("torch/nn/modules/linear.py", "class Linear(Module)")
    assert answers["modules"]["title"].endswith(f"@ {linear}")
    assert not answers["missing"]["found"]
    assert answers["missing"]["suggestions"]

    # Unresolved calls by name (`t.matmul(...)` on a receiver the index cannot type) are
    # possible callers at the first level only, unless fuzzy_all_levels.
    def possible_levels(key: str) -> set[int]:
        return {
            i["data"]["level"] for i in answers[key]["items"] if i["data"].get("unresolved_name")
        }

    assert possible_levels("impact") <= {1}
    assert 2 in possible_levels("fuzzy")
    assert (
        answers["fuzzy"]["data"]["possible_by_name"] > answers["impact"]["data"]["possible_by_name"]
    )
