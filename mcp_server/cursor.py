"""`torchtalk cursor-add`: register the server in a Cursor project, and tell its agent when
to use the tools.

``PROJECT/.cursor/mcp.json`` is merged, never clobbered: other servers and keys stay as
they are, an existing ``torchtalk`` entry is replaced, and a file that is not valid JSON
is an error that leaves it untouched. Both files are written to a temporary file and
renamed into place.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from indexer import durable
from indexer.errors import UsageError
from indexer.locations import require_source

SERVER_NAME = "torchtalk"

RULES = """\
---
description: Use the TorchTalk MCP tools for structural questions about PyTorch-style code
alwaysApply: true
---

# TorchTalk

The `torchtalk` MCP server answers from an index of {source} (Python, C++ and CUDA,
linked across languages). Every answer line ends with repo-relative `file:line` evidence:
open those lines rather than guessing.

Use it instead of grepping when a question crosses the Python / C++ / CUDA boundary:

- `get_status()`: first, and whenever an answer says it is incomplete (the C++ call
  graph builds in the background on first use).
- `trace(func, focus?)`: how `torch.X` works or where it is implemented: Python -> op
  schema -> dispatch per backend -> C++/CUDA kernel, through composite kernels to the
  ops they call and the libraries (cuBLAS, cuDNN, MKL, oneDNN) they end in. Pass
  `focus="cuda"` or `focus="CPU"` (a dispatch key) for one backend's path.
- `search(query, mode="bindings"|"kernels", backend?)`: find ops and bindings, or the
  kernels of an op or host function, when you only know part of a name.
- `graph(func, mode="callers"|"calls"|"impact", depth?, walk_python?, focus?)`: who
  calls a function, what it calls, and everything a change to it can reach
  (`walk_python=true` continues into Python code and tests; `focus="tests"` lists tests).
- `modules(name, mode="trace"|"list")`: Python classes and modules (`torch.nn.Linear`).
- `tests(query, mode="find"|"utils"|"file_info")`: find the tests of an op or a file.
- `affected(funcs)`: before running tests for a change, which tests can the changed
  functions break, with the evidence chain for each.

Answers keep to about 2,000 characters and say how many lines they left out; pass
`limit=N` (or a narrower `focus`) for more, or read the structured content.
"""


def _atomic_write(path: Path, text: str) -> None:
    durable.write_atomic(path, text.encode("utf-8"))


def _read_config(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text; left unchanged") from None
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
            "left unchanged"
        ) from None
    if not isinstance(data, dict):
        raise UsageError(f"{path} must hold a JSON object; left unchanged")
    if not isinstance(data.get("mcpServers", {}), dict):
        raise UsageError(f"{path}: 'mcpServers' must be a JSON object; left unchanged")
    return data


def torchtalk_command() -> str:
    """This installation's ``torchtalk`` executable: Cursor may not share our PATH."""
    beside = Path(sys.executable).with_name("torchtalk")
    if beside.is_file():
        return str(beside)
    return shutil.which("torchtalk") or "torchtalk"


def server_entry(source: Path, harness: str | None = None) -> dict[str, Any]:
    args = ["mcp-serve", "--source", str(source)]
    if harness:
        args += ["--harness", harness]
    return {"command": torchtalk_command(), "args": args}


def add_to_cursor(project: str | Path, source: str | Path, harness: str | None = None) -> list[str]:
    """Register the server in ``project``; returns what was done, one line each."""
    project_dir = Path(project).expanduser()
    if not project_dir.is_dir():
        raise UsageError(f"project {str(project_dir)!r} is not a directory")
    source_dir = require_source(source)
    if harness:
        from indexer.harness import load_harness

        load_harness(harness)  # an unknown name fails now, not when Cursor starts the server
    config_path = project_dir / ".cursor" / "mcp.json"
    rules_path = project_dir / ".cursor" / "rules" / "torchtalk.mdc"
    config = _read_config(config_path)
    servers = config.setdefault("mcpServers", {})
    entry = server_entry(source_dir, harness)
    before = servers.get(SERVER_NAME)
    servers[SERVER_NAME] = entry
    lines = []
    if before == entry:
        lines.append(f"{config_path}: {SERVER_NAME} already registered")
    else:
        _atomic_write(config_path, json.dumps(config, indent=2) + "\n")
        others = len(servers) - 1
        verb = "updated" if before is not None else "added"
        lines.append(
            f"{config_path}: {verb} {SERVER_NAME} ({others} other server(s) kept): "
            f"{entry['command']} {' '.join(entry['args'])}"
        )
    _atomic_write(rules_path, RULES.format(source=source_dir))
    lines.append(f"{rules_path}: rules for when to use the tools")
    return lines
