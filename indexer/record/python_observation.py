"""Which way the recorder observes Python in this process: chosen here, and only here.

- Python 3.12 and later: ``sys.monitoring`` with the recorder's own tool id
  (``python_monitoring.py``), unless another tool holds that id; then the profile
  function, and ``how`` says why in one line (the record's ``meta.mechanisms.python``).
- Python 3.10 and 3.11: the C profile function (``python_profile.py``).

Both give the same record (docs/recording.md#sysmonitoring); ``TORCHTALK_RECORD_PYTHON``
(``profile`` or ``monitoring``) forces one, for the bench and the equivalence tests, and
is refused in one line where it cannot be had. Child processes read the same variable.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Protocol

from indexer.record.native import NativeUnavailable
from indexer.record.python_profile import ProfileObservation

BACKEND_ENV = "TORCHTALK_RECORD_PYTHON"
BACKENDS = ("profile", "monitoring")


class PythonObservation(Protocol):
    how: str  # the record's meta.mechanisms.python
    aside: bool  # stood aside for torch's tracer (docs/recording.md#profilers)
    by_profile_function: bool  # whether replacing the profile function blinds it

    def start(self, new_thread: Callable) -> None: ...
    def observe_thread(self) -> None: ...
    def stop(self) -> None: ...
    def step_aside(self) -> None: ...
    def check(self) -> list[str]: ...


def choose(lib) -> PythonObservation:
    """The Python observation for this process (not started); NativeUnavailable when the
    one ``TORCHTALK_RECORD_PYTHON`` asks for cannot be had."""
    wanted = os.environ.get(BACKEND_ENV, "")
    if wanted and wanted not in BACKENDS:
        raise NativeUnavailable(f"{BACKEND_ENV}={wanted!r}: expected 'profile' or 'monitoring'")
    has_monitoring = sys.version_info >= (3, 12)
    if wanted == "profile" or (not wanted and not has_monitoring):
        return ProfileObservation(lib)
    if not has_monitoring:
        raise NativeUnavailable(f"{BACKEND_ENV}=monitoring needs Python 3.12 or later")
    from indexer.record import python_monitoring

    held_by = python_monitoring.holder()
    if held_by not in (None, python_monitoring.TOOL_NAME):
        why = f"sys.monitoring tool id {python_monitoring.TOOL_ID} is held by {held_by!r}"
        if wanted:
            raise NativeUnavailable(f"{BACKEND_ENV}=monitoring: {why}")
        fallback = ProfileObservation(lib)
        fallback.how = f"{fallback.how}: {why}"
        return fallback
    return python_monitoring.MonitoringObservation(lib)
