"""The MCP server: seven read-only tools over one index, on stdio or streamable HTTP.

Start-up is kept short for agents that launch the server per session: the index is
opened on the first request, query modules are imported when their tool is first
called, and a missing index is built in the background (see :mod:`mcp_server.state`).
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from pydantic import ValidationError

from indexer.errors import UsageError
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


# JSON-RPC 2.0's codes, as the HTTP transport answers them.
PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602


def malformed_reply(error: Exception) -> tuple[int, str, str | int | None] | None:
    """(code, message, id) answering a line the stdio transport could not read as
    JSON-RPC; None for a malformed notification (it gets no answer). The line itself is
    gone: a message's fields are in the errors pydantic reports against its whole object."""
    if not isinstance(error, ValidationError):
        return INVALID_REQUEST, "Invalid Request", None
    errors = error.errors()
    if any(err["type"] == "json_invalid" for err in errors):
        return PARSE_ERROR, "Parse error", None
    whole = next((e["input"] for e in errors if isinstance(e.get("input"), dict)), None)
    if whole is None:
        return INVALID_REQUEST, "Invalid Request", None
    ident = whole.get("id")
    ident = ident if isinstance(ident, (str, int)) and not isinstance(ident, bool) else None
    if "method" in whole and ident is None:
        return None
    if isinstance(whole.get("method"), str) and "params" in whole:
        return INVALID_PARAMS, "Invalid params", ident
    return INVALID_REQUEST, "Invalid Request", ident


DRAIN_SECONDS = 60.0  # at end of input, how long answers still owed are waited for


class _AnsweringStream:
    """The stdio transport's read stream, answering each line that is not JSON-RPC with
    its error (the SDK drops them there, and a client waits for ever) and passing the
    rest on. Duck-typed as the dispatcher reads it: ``async with``, ``async for``,
    ``last_context``."""

    def __init__(self, inner: Any, write_stream: _AnsweredWrites) -> None:
        self._inner = inner
        self._write = write_stream

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def __aenter__(self) -> _AnsweringStream:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> Any:
        return await self._inner.__aexit__(*exc_info)

    async def aclose(self) -> None:
        await self._inner.aclose()

    def close(self) -> None:
        self._inner.close()

    def __aiter__(self) -> _AnsweringStream:
        return self

    async def __anext__(self) -> Any:
        from mcp.shared.message import SessionMessage
        from mcp_types import ErrorData, JSONRPCError

        while True:
            try:
                item = await self._inner.__anext__()
            except StopAsyncIteration:
                # The SDK cancels what is in flight at end of input; a client that wrote
                # its requests and closed stdin (`printf ... | torchtalk mcp-serve`) is
                # answered first.
                await self._write.drained(DRAIN_SECONDS)
                raise
            if not isinstance(item, Exception):
                self._write.expect(item)
                return item
            reply = malformed_reply(item)
            if reply is not None:
                code, message, ident = reply
                error = JSONRPCError(
                    jsonrpc="2.0", id=ident, error=ErrorData(code=code, message=message)
                )
                await self._write.send(SessionMessage(error))


class _AnsweredWrites:
    """The stdio transport's write stream, noting which requests have been answered, so
    that the end of input waits for the answers still owed."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._owed: set[Any] = set()
        self._settled = anyio.Event()

    def expect(self, item: Any) -> None:
        message = getattr(item.message, "root", item.message)
        if (
            getattr(message, "method", None) is not None
            and getattr(message, "id", None) is not None
        ):
            self._owed.add(message.id)

    async def drained(self, seconds: float) -> None:
        with anyio.move_on_after(seconds):
            while self._owed:
                self._settled = anyio.Event()
                await self._settled.wait()

    async def send(self, item: Any) -> None:
        await self._inner.send(item)
        message = getattr(item.message, "root", item.message)
        if getattr(message, "method", None) is None and getattr(message, "id", None) in self._owed:
            self._owed.discard(message.id)
            self._settled.set()

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _AnsweredWrites:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> Any:
        return await self._inner.__aexit__(*exc_info)


class TorchTalkServer(MCPServer):
    """MCPServer whose argument errors read as one clear line per argument, and whose
    stdio transport answers malformed messages as its HTTP transport does."""

    async def run_stdio_async(self) -> None:
        from mcp.server.stdio import stdio_server

        try:
            async with stdio_server() as (read_stream, write_stream):
                writes = _AnsweredWrites(write_stream)
                await self._lowlevel_server.run(
                    _AnsweringStream(read_stream, writes),
                    writes,
                    self._lowlevel_server.create_initialization_options(),
                )
        except Exception as exc:
            if not _client_gone(exc):
                raise  # a client that left mid-answer ends the session quietly

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


def _client_gone(error: BaseException) -> bool:
    """Whether ``error`` (an exception group, maybe nested) holds only broken pipes."""
    inner = getattr(error, "exceptions", None)
    if inner is not None:
        return all(_client_gone(each) for each in inner)
    return isinstance(error, (BrokenPipeError, ConnectionResetError))


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


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, or a one-line error (a busy port, a host
    that is not this machine's) before anything says it serves."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise UsageError(f"cannot serve on {host}:{port}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def serve(
    state: ServerState,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
    announce: Callable[[], None] | None = None,
) -> None:
    """Serve until the client (stdio) or a signal (HTTP) ends it; ``announce`` is called
    once the HTTP port is bound."""
    from mcp_server.sdk import start_up

    with start_up():
        server = build_server(state)
    if transport == "stdio":
        server.run("stdio")
        return
    import uvicorn

    sock = bind(host, port)
    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning")
    if announce is not None:
        announce()
    anyio.run(lambda: uvicorn.Server(config).serve(sockets=[sock]))
