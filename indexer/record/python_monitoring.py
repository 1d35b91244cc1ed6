"""Python observed through ``sys.monitoring`` (Python 3.12+), with the recorder's own tool id.

The compiled recorder's callbacks (``native_recorder.cpp``, ``mon_*``) note what ran, as
the profile function does, and disable each event's location once it is noted: a
function costs one ``PY_START`` per window between two drains, and the interpreter
stays specialized. Each drain that follows a ``DISABLE`` calls
``sys.monitoring.restart_events()``, so that the next window sees every function again
(docs/recording.md#sysmonitoring). One observation per interpreter: every thread at
once, no per-thread set-up.

``restart_events`` re-enables what every tool disabled, not only ours: another tool
(coverage.py) gets events it had disabled again; it reads them as seen before.
"""

from __future__ import annotations

import sys

from indexer.record.children import STOOD_ASIDE

TOOL_ID = 4  # of the two ids CPython leaves to tools of no declared kind (3 and 4)
TOOL_NAME = "torchtalk-record"


def holder() -> str | None:
    """The name of the tool holding our id, or None when it is free."""
    return sys.monitoring.get_tool(TOOL_ID)


class MonitoringObservation:
    """The recorder's sys.monitoring tool; ``check`` says when a test disturbed it."""

    how = f"sys.monitoring (tool id {TOOL_ID}, events disabled once seen per window)"
    by_profile_function = False  # a test's sys.setprofile leaves it whole

    def __init__(self, lib) -> None:
        self._lib = lib
        monitoring = sys.monitoring
        events = monitoring.events
        start, throw, end, call = lib.tt_monitoring_callbacks()
        self._callbacks = {
            events.PY_START: start,
            events.PY_RESUME: start,
            events.PY_THROW: throw,
            events.PY_RETURN: end,  # turned on for module bodies only (watch_return)
            events.PY_UNWIND: end,
            events.CALL: call,
        }
        self._events = (
            events.PY_START | events.PY_RESUME | events.PY_THROW | events.PY_UNWIND
            | events.CALL
        )  # fmt: skip
        self._return = events.PY_RETURN
        self.aside = False  # stood aside for a profiler that traces Python

    def _watch_return(self, code) -> None:
        # Called by mon_start when a module body starts: its end is a PY_RETURN.
        sys.monitoring.set_local_events(TOOL_ID, code, self._return)

    def start(self, new_thread=None) -> None:
        """Takes the tool id (free, or left by an earlier observer of this process) and
        turns the events on. ``new_thread`` is the profile backend's: unused here."""
        monitoring = sys.monitoring
        if holder() is None:
            monitoring.use_tool_id(TOOL_ID, TOOL_NAME)
        for event, callback in self._callbacks.items():
            monitoring.register_callback(TOOL_ID, event, callback)
        code = self._lib.tt_monitoring_on(
            monitoring.DISABLE, monitoring.MISSING, monitoring.restart_events,
            self._watch_return,
        )  # fmt: skip
        if code != 0:
            raise RuntimeError("the compiled recorder has no sys.monitoring callbacks")
        monitoring.set_events(TOOL_ID, self._events)

    def observe_thread(self) -> None:
        """Every thread is observed already."""

    def stop(self) -> None:
        self._lib.tt_monitoring_off()
        monitoring = sys.monitoring
        if holder() != TOOL_NAME:
            return
        monitoring.set_events(TOOL_ID, 0)
        for event in self._callbacks:
            monitoring.register_callback(TOOL_ID, event, None)
        monitoring.free_tool_id(TOOL_ID)

    def step_aside(self) -> None:
        """Events off until torch's tracer is gone (docs/recording.md#profilers): our
        instrumented call sites would report a C function's return to its profile
        function, which saw no call."""
        self.aside = True
        sys.monitoring.set_events(TOOL_ID, 0)

    def check(self) -> list[str]:
        """What disturbed the observation since the previous check (restored where it can
        be): our tool id freed or taken, our events turned off, our callbacks replaced,
        or events set aside for torch's tracer."""
        monitoring = sys.monitoring
        if self.aside:
            if type(sys.getprofile()).__name__ == "TraceContext":  # the tracer, still on
                return [STOOD_ASIDE]
            self.aside = False
            monitoring.set_events(TOOL_ID, self._events)
            return [STOOD_ASIDE]
        now = holder()
        if now != TOOL_NAME:
            if now is not None:
                return [
                    f"sys.monitoring tool id {TOOL_ID} was taken by {now!r}: Python "
                    "functions are not observed"
                ]
            self.start()
            return [f"sys.monitoring tool id {TOOL_ID} was freed (sys.monitoring.free_tool_id)"]
        problems: list[str] = []
        if self._lib.tt_monitoring_restart_failed():
            problems.append(
                "sys.monitoring.restart_events() failed: functions run before may not be "
                "observed again"
            )
        if monitoring.get_events(TOOL_ID) != self._events:
            problems.append(f"sys.monitoring events of tool id {TOOL_ID} were changed")
            monitoring.set_events(TOOL_ID, self._events)
        replaced = [
            event for event, callback in self._callbacks.items()
            if monitoring.register_callback(TOOL_ID, event, callback) is not callback
        ]  # fmt: skip
        if replaced:
            problems.append(f"sys.monitoring callbacks of tool id {TOOL_ID} were replaced")
        return problems
