"""Talk to `torchtalk mcp-serve` the way agents do: a subprocess over stdio, the SDK's client."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp.client import Client
from mcp.client.stdio import StdioServerParameters


def torchtalk_command() -> list[str]:
    """The installed `torchtalk` script beside this interpreter, else `python -m`."""
    script = Path(sys.executable).with_name("torchtalk")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "pytest_torchtalk"]


def server_params(source: Path, *extra: str) -> StdioServerParameters:
    command, *args = torchtalk_command()
    # The client passes only a safe subset of the environment; the cache and config
    # directories are what keep the server inside the test's sandbox.
    env = {
        key: os.environ[key]
        for key in ("TORCHTALK_CACHE_DIR", "TORCHTALK_CONFIG_DIR")
        if key in os.environ
    }
    return StdioServerParameters(
        command=command,
        args=[*args, "mcp-serve", "--source", str(source), *extra],
        env=env,
    )


@asynccontextmanager
async def stdio_session(source: Path, *extra: str, mode: str = "auto") -> AsyncIterator[Client]:
    """``mode="legacy"`` speaks the initialize handshake of today's clients (Claude Code,
    Cursor); "auto" negotiates the newest protocol the SDK knows."""
    params = server_params(source, *extra)
    async with Client(params, read_timeout_seconds=120, mode=mode) as client:
        yield client


def text_of(result: Any) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")
