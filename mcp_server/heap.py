"""The server's heap between requests: what the index's caches leave to the collector.

A served index grows long-lived tracked objects as it is used: the name list and the
lookup tables loaded when idle, a record's lookups, the impact walker's per-file caches
(~110,000 objects on PyTorch after warming and a first ``affected``). Python's full
collection walks every one of them, and when it falls inside a request it is that
request's tail: 44-54 ms on PyTorch, against an ``affected`` answer of ~10 ms. So once
the server is idle after new work, it collects (the cyclic garbage the requests left)
and freezes the survivors (``gc.freeze``), as start-up does with the SDK's objects
(``mcp_server.sdk``): later collections, in requests, walk only what is new.

Frozen objects freed by reference counting are still freed; only a cycle among them
outlives its use until the collector sees it again: when the served index is replaced (its
caches refer back to it) :func:`release` gives everything back at once, and every
``FULL_EVERY_S`` a settle collects everything before freezing again, so what a long
session leaves in cycles (an evicted cache entry) is freed within that time.
"""

from __future__ import annotations

import gc
import time

FULL_EVERY_S = 600.0  # at most this long between collections of everything (~50 ms)
_last_full = time.monotonic()


def settle() -> None:
    """Collect, then keep what survived out of later collections (call when idle: a
    collection of everything takes tens of milliseconds on a warmed PyTorch index)."""
    global _last_full
    if time.monotonic() - _last_full >= FULL_EVERY_S:
        gc.unfreeze()
        _last_full = time.monotonic()
    gc.collect()
    gc.freeze()


def release() -> None:
    """Give every frozen object back to the collector (an index is being replaced: its
    caches become garbage, some of it cyclic); the next :func:`settle` freezes again."""
    gc.unfreeze()
