"""Capturing the CUDA kernels each test launches, where a GPU is present.

The kernels are the profiler's CUDA activity (Kineto, CUPTI underneath): one profiler
session per test, asking for ``ProfilerActivity.CUDA`` only (no CPU activity: the ops are
the RecordFunction callback's, and CPU events would cost every op call), exported as the
chrome trace that ``indexer.record.cuda_trace`` reads.

A thread holds one Kineto session: a test that starts its own profiler under ours ends
ours with its own (torch 2.6 then refuses our stop: "Can't disable Kineto profiler when
it's not running"; tried here on 2.6.0 and 2.13.0), and a test that checks what its
profiler saw may see ours. The capture gives way instead: it wraps ``torch.autograd.profiler._prepare_profiler``, the one call
every ``torch.profiler.profile`` and ``torch.autograd.profiler.profile`` start goes
through, and when a test starts a profiler it stops its own session first, keeps the
kernels seen until then, and says that the test's kernels are incomplete. A test that
starts while another profiler is on is not captured, with that reason.

Where there is no GPU, or torch's profiler has no CUDA activity, the capture is off, and
:func:`capture_off_reason` says why: that is the record's ``mechanisms.cuda_kernels``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from types import ModuleType

from indexer.record.cuda_trace import KernelLaunch, TraceError, read_trace


def capture_off_reason(torch: ModuleType | None) -> str:
    """'' when CUDA kernels can be captured here; else why not, as 'off: ...'."""
    if torch is None:
        return "off: torch is not importable"
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not cuda.is_available():
        return "off: no CUDA device"
    try:
        supported = torch.autograd._supported_activities()
        activity = torch.profiler.ProfilerActivity.CUDA
    except (AttributeError, RuntimeError) as exc:
        return f"off: torch's profiler cannot be asked for CUDA activity ({exc})"
    if activity not in supported:
        return "off: torch's profiler has no CUDA activity (Kineto built without CUPTI)"
    if not callable(getattr(torch.autograd.profiler, "_prepare_profiler", None)):
        # The capture gives way to a test's own profiler through this call.
        return "off: this torch has no torch.autograd.profiler._prepare_profiler to yield through"
    return ""


class KernelCapture:
    """One profiler session per test; ``start`` before its setup, ``stop`` after its
    teardown."""

    def __init__(self, torch: ModuleType, activities: list | None = None) -> None:
        """``activities``: the profiler's, CUDA only unless given (the tests give CPU, to
        run the session's start, yielding and stop on a machine without a GPU)."""
        self._torch = torch
        self._activities = activities or [torch.profiler.ProfilerActivity.CUDA]
        self._session = None  # the running torch.profiler.profile, or None
        self._starting = False
        self._launches: list[KernelLaunch] = []
        self._problems: list[str] = []
        self._module = torch.autograd.profiler
        self._original_prepare = self._module._prepare_profiler
        self._module._prepare_profiler = self._prepare_profiler

    def _prepare_profiler(self, *args, **kwargs):
        # A profiler is being started. Ours: go on. The test's: stop ours first.
        if not self._starting and self._session is not None:
            self._end_session()
            self._problems.append(
                "kernels after the test started its own profiler are not recorded"
            )
        return self._original_prepare(*args, **kwargs)

    def start(self) -> None:
        self._launches, self._problems = [], []
        if self._torch.autograd._profiler_enabled():
            self._problems.append("kernels not recorded: a profiler was already running")
            return
        session = self._torch.profiler.profile(activities=self._activities)
        self._starting = True
        try:
            session.start()
        except RuntimeError as exc:
            self._problems.append(f"kernels not recorded: the profiler did not start ({exc})")
            return
        finally:
            self._starting = False
        self._session = session

    def stop(self) -> tuple[list[KernelLaunch], list[str]]:
        """The kernels the test launched, and why that list is incomplete (if it is)."""
        if self._session is not None:
            self._end_session()
        return self._launches, self._problems

    def _end_session(self) -> None:
        session, self._session = self._session, None
        handle, name = tempfile.mkstemp(prefix="torchtalk-kernels-", suffix=".json")
        os.close(handle)
        trace = Path(name)
        try:
            if self._torch.cuda.is_initialized():
                self._torch.cuda.synchronize()  # kernels still queued belong to this test
            session.stop()
            session.export_chrome_trace(str(trace))
            self._launches.extend(read_trace(trace))
        except (RuntimeError, TraceError) as exc:
            self._problems.append(f"kernels not recorded: {exc}")
        finally:
            trace.unlink(missing_ok=True)

    def close(self) -> None:
        """Stop any session and give ``_prepare_profiler`` back."""
        if self._session is not None:
            self._end_session()
        self._module._prepare_profiler = self._original_prepare
