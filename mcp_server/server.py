"""The MCP server: seven read-only tools over one index, on stdio or streamable HTTP.

Start-up is kept short for agents that launch the server per session: the index is
opened on the first request, query modules are imported when their tool is first
called, and a missing index is built in the background (see :mod:`mcp_server.state`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from pydantic import ValidationError

from mcp_server.state import ServerState
from mcp_server.tools import Tools, annotations

INSTRUCTIONS = """\
TorchTalk answers structural questions about a PyTorch-style source tree (Python, C++,
CUDA) from a prebuilt index; every answer line carries repo-relative file:line evidence.
Prefer it to grepping when a question crosses languages: trace (Python API -> op ->
kernel), search (registrations by name), graph (callers, callees, impact), modules
(Python classes and modules), tests (find tests), affected (tests a change can break).
Call get_status first: while the index is building, answers say what is still missing.
"""


SHOWN_INPUT = 80  # characters of a bad argument quoted back
SHOWN_PROBLEMS = 5


def _shown(value: Any) -> str:
    """A bad argument as quoted in an error: its start, not 100 KB echoed back."""
    text = repr(value)
    if len(text) <= SHOWN_INPUT:
        return text
    return f"{text[:SHOWN_INPUT]}... ({len(text)} characters)"


def _friendly(tool: str, error: ValidationError) -> str:
    """One line per bad argument, without pydantic's URLs: the model reads this."""
    problems = []
    errors = error.errors()
    for err in errors[:SHOWN_PROBLEMS]:
        where = ".".join(str(part) for part in err["loc"]) or "arguments"
        got = (
            f" (got {_shown(err['input'])})" if "input" in err and err["type"] != "missing" else ""
        )
        problems.append(f"{where}: {err['msg']}{got}")
    if len(errors) > SHOWN_PROBLEMS:
        problems.append(f"and {len(errors) - SHOWN_PROBLEMS} more")
    return f"{tool}: invalid arguments: " + "; ".join(problems)


class TorchTalkServer(MCPServer):
    """MCPServer whose argument errors read as one clear line per argument."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(_friendly(name, exc.__cause__)) from exc.__cause__
            # The SDK prefixes "Error executing tool NAME: "; our messages name the tool.
            message = str(exc).removeprefix(f"Error executing tool {name}: ")
            raise ToolError(message) from exc.__cause__


def build_server(state: ServerState) -> MCPServer:
    """The server with its seven tools; the lifespan starts and stops the index build."""

    @asynccontextmanager
    async def lifespan(_server: MCPServer) -> AsyncIterator[None]:
        # Started here, once the stdio transport has taken fd 1 for itself, so the build's
        # worker processes inherit a stdout that cannot corrupt the protocol stream.
        state.start()
        try:
            yield
        finally:
            await anyio.to_thread.run_sync(state.stop)

    from importlib.metadata import PackageNotFoundError, version

    try:
        own_version = version("torchtalk")
    except PackageNotFoundError:
        own_version = "0"
    server = TorchTalkServer(
        "torchtalk",
        title="TorchTalk",
        instructions=INSTRUCTIONS,
        version=own_version,
        lifespan=lifespan,
        log_level="WARNING",
    )
    tools = Tools(state)
    for spec, function in tools.functions():
        server.add_tool(
            function,
            name=spec.name,
            title=spec.title,
            description=spec.description,
            annotations=annotations(spec),
        )
    return server


def serve(
    state: ServerState, transport: str = "stdio", host: str = "127.0.0.1", port: int = 8000
) -> None:
    from mcp_server.sdk import start_up

    with start_up():
        server = build_server(state)
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=port)
