"""Import the MCP SDK quickly: most of a cold start is the SDK defining ~600 pydantic
models for every protocol version, of which a session uses a few dozen.

pydantic's ``defer_build`` postpones a model's validator until its first use. It is
switched on only while the SDK's modules are imported (through pydantic's config
defaults, which have no public setter) and restored at once, so our own models and
everything imported later behave as usual. If pydantic changes that internal, the SDK
is simply imported the ordinary way.
"""

from __future__ import annotations

import sys


def preload() -> None:
    """Import the SDK modules the server uses, with model building deferred."""
    if "mcp.server.mcpserver" in sys.modules:
        return
    try:
        from pydantic._internal._config import config_defaults
    except ImportError:  # pragma: no cover - a pydantic without that internal
        config_defaults = None
    if not isinstance(config_defaults, dict) or "defer_build" not in config_defaults:
        import mcp.server.mcpserver

        return
    previous = config_defaults["defer_build"]
    config_defaults["defer_build"] = True
    try:
        import mcp.server.mcpserver
        import mcp.server.stdio  # noqa: F401
    finally:
        config_defaults["defer_build"] = previous
