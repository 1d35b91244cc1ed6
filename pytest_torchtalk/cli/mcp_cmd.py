"""`torchtalk mcp-serve` (the index served to coding agents) and `torchtalk cursor-add`."""

from __future__ import annotations

import argparse
import sys

from indexer.errors import UsageError
from pytest_torchtalk.cli import add_source_arguments


def register(subparsers: argparse._SubParsersAction) -> None:
    serve = subparsers.add_parser(
        "mcp-serve",
        help="serve the index to coding agents over MCP (stdio by default)",
        description="Serve the index over MCP. With no index yet, the quick parts (YAML, "
        "bindings, Python, tests) are built and served first while the C++ call graph "
        "builds in the background.",
    )
    add_source_arguments(serve)
    serve.add_argument(
        "--transport",
        choices=("stdio", "streamable-http"),
        default="stdio",
        help="stdio (default; the client starts this command) or streamable-http",
    )
    serve.add_argument("--host", default="127.0.0.1", help="streamable-http address")
    serve.add_argument("--port", type=int, default=8000, help="streamable-http port")
    serve.add_argument(
        "--jobs", "-j", type=int, metavar="N", help="worker processes for a background build"
    )
    serve.set_defaults(handler=run_serve)

    cursor = subparsers.add_parser(
        "cursor-add",
        help="register the MCP server in a Cursor project (.cursor/mcp.json and a rules file)",
    )
    cursor.add_argument(
        "-C", "--project", required=True, metavar="PROJECT", help="the Cursor project directory"
    )
    cursor.add_argument(
        "-p", "--source", required=True, metavar="SOURCE", help="source tree to serve"
    )
    cursor.add_argument("--harness", metavar="NAME", help="harness manifest to apply")
    cursor.set_defaults(handler=run_cursor_add)


def run_serve(args: argparse.Namespace) -> int:
    from indexer.workspace import Workspace

    if not 0 < args.port < 65536:
        raise UsageError(f"--port must be between 1 and 65535 (got {args.port})")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1 (got {args.jobs})")
    from mcp_server.sdk import preload, start_up

    with start_up():  # the first answer is mostly this start-up: see mcp_server.sdk
        workspace = Workspace.resolve(args.source, args.harness)
        preload()
        from mcp_server.server import serve
        from mcp_server.state import ServerState

        state = ServerState(workspace, jobs=args.jobs)

    def announce() -> None:  # once the port is bound: a busy one fails before this
        print(
            f"torchtalk: serving {workspace.source} ({workspace.harness}) on "
            f"http://{args.host}:{args.port}/mcp",
            file=sys.stderr,
            flush=True,
        )

    serve(state, args.transport, args.host, args.port, announce)
    return 0


def run_cursor_add(args: argparse.Namespace) -> int:
    from mcp_server.cursor import add_to_cursor

    for line in add_to_cursor(args.project, args.source, args.harness):
        print(line)
    return 0
