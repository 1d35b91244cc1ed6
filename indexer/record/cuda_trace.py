"""The CUDA kernels a profiler trace shows launched, and what launched each.

The input is the chrome-trace JSON that PyTorch's profiler writes
(``torch.profiler.profile.export_chrome_trace``, ``_ProfilerResult.save``; Kineto's
format). The events read:

- ``cat: kernel``: a kernel that ran on the GPU: ``name``, and in ``args`` the
  ``correlation`` of the runtime call that launched it and, when CPU activity was on,
  the ``External id`` of the operator that was running;
- ``cat: cuda_runtime`` (``cuda_driver`` for driver launches): the host-side launch
  (``cudaLaunchKernel``, ``cuLaunchKernel``...), with the same ``correlation``;
- ``cat: cpu_op``: an operator (``aten::mm``), whose ``args["External id"]`` the runtime
  calls and kernels made under it carry.

A trace without GPU activity (a CPU-only machine) has no kernel events: it yields no
launches, which is not an error. What is not a trace at all is refused
(:class:`TraceError`), so a broken capture is never read as "no kernel ran".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from indexer.errors import TorchTalkError

KERNEL_CATEGORY = "kernel"
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
OP_CATEGORY = "cpu_op"


class TraceError(TorchTalkError):
    """Profiler output that cannot be read as a trace."""


@dataclass(frozen=True, order=True)
class KernelLaunch:
    kernel: str  # the kernel's name as the GPU reported it (C++ signature for templates)
    launch: str  # the host call that launched it ('cudaLaunchKernel'), '' when not traced
    op: str  # the operator running when it was launched ('aten::mm'), '' when unknown


def _events(trace: object) -> list[dict]:
    if isinstance(trace, list):  # the chrome format also allows a bare event list
        events = trace
    elif isinstance(trace, dict) and isinstance(trace.get("traceEvents"), list):
        events = trace["traceEvents"]
    else:
        raise TraceError("not a profiler trace: no traceEvents list")
    return [e for e in events if isinstance(e, dict)]


def kernel_launches(trace: object) -> list[KernelLaunch]:
    """Every distinct kernel launch in a parsed chrome trace, sorted; [] when it has none."""
    ops: dict[object, str] = {}
    launches: dict[object, str] = {}
    kernels: list[tuple[str, dict]] = []
    for event in _events(trace):
        category = event.get("cat")
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        name = event.get("name")
        if not isinstance(name, str):
            continue
        if category == OP_CATEGORY and "External id" in args:
            # The innermost op wins: nested ops share no id, so the last seen is fine.
            ops[args["External id"]] = name
        elif category in LAUNCH_CATEGORIES and "correlation" in args:
            launches[args["correlation"]] = name
        elif category == KERNEL_CATEGORY:
            kernels.append((name, args))
    found = {
        KernelLaunch(
            kernel=name,
            launch=launches.get(args.get("correlation"), ""),
            op=ops.get(args.get("External id"), ""),
        )
        for name, args in kernels
    }
    return sorted(found)


def read_trace(path: Path) -> list[KernelLaunch]:
    """The kernel launches in the trace file at ``path``."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise TraceError(f"cannot read the profiler trace {path}: {exc.strerror or exc}") from None
    try:
        trace = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"profiler trace {path} is not JSON: {exc.msg}") from None
    return kernel_launches(trace)
