"""Import the MCP SDK quickly: most of a cold start is the SDK defining ~600 pydantic
models for every protocol version, of which a session uses a few dozen.

Two things make that import cheaper without touching the SDK:

* pydantic's ``defer_build`` postpones a model's validator until its first use. It is
  switched on only while the SDK's modules are imported (through pydantic's config
  defaults, which have no public setter) and restored at once, so our own models and
  everything imported later behave as usual. If pydantic changes that internal, the SDK
  is simply imported the ordinary way.
* the cyclic garbage collector is paused during start-up (:func:`start_up`): the import
  creates ~120,000 long-lived tracked objects, and the collector would walk them over
  and over (~0.07 s of CPU here, a tenth of the import; under 1,000 objects of garbage
  are left uncollected). Once started, they are frozen (``gc.freeze``) so later
  collections, and the one at exit, skip them too.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def start_up() -> Iterator[None]:
    """Run the server's start-up with the cyclic collector paused, then freeze what it
    built (modules, classes, the server's tools) out of later collections."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


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
