"""Python observed through the compiled recorder's C profile function (``PyEval_SetProfile``).

Every Python function entered and every C function called from Python, on every thread
(new threads get it through ``threading.setprofile``), with no Python code per event.
The backend for Python 3.10 and 3.11, and wherever sys.monitoring cannot be used
(``indexer/record/python_observation.py``). What a profile function costs the
interpreter: docs/recording.md#cost.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

from indexer.record.children import STOOD_ASIDE

REPLACED = "the profile function was replaced (sys.setprofile)"


class ProfileObservation:
    """The profile function on every thread; ``check`` says when a test disturbed it."""

    how = "C profile function (PyEval_SetProfile)"
    by_profile_function = True  # a test's sys.setprofile takes it away

    def __init__(self, lib) -> None:
        self._lib = lib
        self._token = object()  # what sys.getprofile() returns while we observe
        self.aside = False  # stood aside for a profiler that traces Python

    def start(self, new_thread: Callable) -> None:
        """Observes this thread now, and each new thread through ``new_thread`` (which
        calls ``observe_thread``: children.py knows the observer's hook by identity)."""
        self._lib.tt_observe_thread(self._token)
        threading.setprofile(new_thread)

    def observe_thread(self) -> None:
        self._lib.tt_observe_thread(self._token)

    def stop(self) -> None:
        threading.setprofile(None)
        self._lib.tt_stop_thread()

    def step_aside(self) -> None:
        """Off every thread, for torch's tracer (docs/recording.md#profilers)."""
        self.aside = True
        self._lib.tt_step_aside()

    def check(self) -> list[str]:
        """What disturbed the observation since the previous check (it is restored where
        it can be): the draining thread's profile function replaced, or set aside."""
        profile = sys.getprofile()
        if profile is self._token:
            return []
        if type(profile).__name__ == "TraceContext":  # torch's tracer, still on
            return [STOOD_ASIDE]
        problem = STOOD_ASIDE if self.aside else REPLACED
        self.aside = False
        self._lib.tt_observe_thread(self._token)
        return [problem]
