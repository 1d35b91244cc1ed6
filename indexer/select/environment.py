"""What a test's skip and xfail decisions read, here and where a record was made.

A test that skipped (or failed as expected) when recorded skips the same way again only
where its decision reads the same answers: the device types present and their
capabilities, the torch build, the Python, the platform, the installed packages and the
``PYTORCH_*``-style variables. The recorder stores this process's answers in the
record's meta (``environment``, made by :func:`current_environment`); the selection
compares them with its own process's (docs/selection.md, "Skipped tests").
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import sys
from typing import Any

# Variables PyTorch's test harness and CI read when deciding what to skip.
VARIABLE_PREFIXES = ("PYTORCH_", "TORCH_", "CUDA_", "HIP_", "ROCM_", "TEST_", "CI", "IN_CI")


def current_environment(torch: Any | None = None) -> dict[str, Any]:
    """This process's answers; ``torch`` is the module, else it is imported here (None in
    ``torch`` when it cannot be: then no record's skips are decided by this one)."""
    if torch is None:
        torch = _import_torch()
    env: dict[str, Any] = {
        "python": ".".join(map(str, sys.version_info[:3])) + f" {sys.implementation.name}",
        "platform": f"{sys.platform} {platform.machine()}",
        "packages": _digest(sorted(_distributions())),
        "variables": _digest(
            sorted(f"{k}={v}" for k, v in os.environ.items() if k.startswith(VARIABLE_PREFIXES))
        ),
        "torch": None,
    }
    if torch is not None:
        version = getattr(torch, "version", None)
        env["torch"] = {
            "version": getattr(torch, "__version__", None),
            "git": getattr(version, "git_version", None),
            "cuda": getattr(version, "cuda", None),
            "hip": getattr(version, "hip", None),
            "debug": getattr(version, "debug", None),
            "devices": _devices(torch),
        }
    return env


def mismatch(recorded: Any, current: dict[str, Any]) -> str:
    """Why ``recorded`` (a record's meta ``environment``) does not answer as ``current``
    does, in a few words; '' when they match."""
    if not isinstance(recorded, dict):
        return "the record does not say what its skips read (made before environments were kept)"
    if current.get("torch") is None:
        return "torch cannot be imported where the selection runs"
    for key in ("python", "platform", "torch", "packages", "variables"):
        if recorded.get(key) != current.get(key):
            return f"recorded on another environment ({_what_differs(key, recorded, current)})"
    return ""


def _what_differs(key: str, recorded: dict, current: dict) -> str:
    if key == "torch" and isinstance(recorded.get(key), dict):
        for part, value in current[key].items():
            if recorded[key].get(part) != value:
                return f"torch {part}: {recorded[key].get(part)!r} there, {value!r} here"
    if key in ("packages", "variables"):
        return "installed packages differ" if key == "packages" else "test variables differ"
    return f"{key}: {recorded.get(key)!r} there, {current.get(key)!r} here"


def _import_torch() -> Any | None:
    if "torch" in sys.modules:
        return sys.modules["torch"]
    try:
        import torch
    except Exception:  # absent, or a source tree's torch/ that is not built
        return None
    return torch


def _devices(torch: Any) -> dict[str, Any]:
    """Device types present, with what skips read of them (CUDA capabilities)."""
    devices: dict[str, Any] = {"cpu": True}
    try:
        cuda = torch.cuda
        if cuda.is_available():
            devices["cuda"] = [
                [cuda.get_device_name(i), list(cuda.get_device_capability(i))]
                for i in range(cuda.device_count())
            ]
        backends = getattr(torch, "backends", None)
        mps = getattr(backends, "mps", None)
        if mps is not None and mps.is_available():
            devices["mps"] = True
        xpu = getattr(torch, "xpu", None)
        if xpu is not None and xpu.is_available():
            devices["xpu"] = xpu.device_count()
    except Exception as exc:  # a broken driver answers differently from none
        devices["error"] = type(exc).__name__
    return devices


def _distributions() -> set[str]:
    found = set()
    for dist in importlib.metadata.distributions():
        name = dist.metadata.get("Name") if dist.metadata else None
        if name:
            found.add(f"{name.lower()}=={dist.version}")
    return found


def _digest(items: list[str]) -> str:
    return hashlib.blake2b("\n".join(items).encode(), digest_size=12).hexdigest()
