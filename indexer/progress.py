"""Progress lines on stderr, only for a person at a terminal."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """``files done / total, rate``, rewritten in place at most a few times a second."""

    def __init__(
        self, label: str, total: int, enabled: bool | None = None, stream: TextIO | None = None
    ) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.label = label
        self.total = total
        self.done = 0
        self.started = time.monotonic()
        self._last_draw = 0.0

    def advance(self, count: int = 1) -> None:
        self.done += count
        now = time.monotonic()
        if self.enabled and (now - self._last_draw > 0.2 or self.done == self.total):
            self._last_draw = now
            rate = self.done / max(now - self.started, 1e-6)
            self.stream.write(f"\r{self.label}: {self.done}/{self.total} files ({rate:.0f}/s)")
            self.stream.flush()

    def close(self, message: str = "") -> None:
        if self.enabled:
            self.stream.write("\r\033[K" + (message + "\n" if message else ""))
            self.stream.flush()
