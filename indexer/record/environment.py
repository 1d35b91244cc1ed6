"""What a test's skip and xfail decisions read, here and where a record was made.

A test that skipped (or failed as expected) when recorded skips the same way again only
where its decision reads the same answers: the device types present and their
capabilities, the torch build, the Python, the platform, the installed packages and the
``PYTORCH_*``-style variables. The recorder stores this process's answers in the
record's meta (``environment``, made by :func:`current_environment`); the selection
compares them with its own process's (docs/selection.md, "Skipped tests").
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
import platform
import sys
from collections.abc import Collection
from pathlib import Path
from typing import Any

# Variables PyTorch's test harness and CI read when deciding what to skip.
VARIABLE_PREFIXES = ("PYTORCH_", "TORCH_", "CUDA_", "HIP_", "ROCM_", "TEST_", "CI", "IN_CI")


def current_environment(torch: Any | None = None) -> dict[str, Any]:
    """This process's answers; ``torch`` is the module where the caller has it (else
    read from the installed torch's version.py, and imported only where a device other
    than the CPU may be present; None in ``torch`` when there is no torch: then no
    record's skips are decided here)."""
    key = id(torch) if torch is not None else None
    if key not in _made:
        _made[key] = {
            "python": ".".join(map(str, sys.version_info[:3])) + f" {sys.implementation.name}",
            "platform": f"{sys.platform} {platform.machine()}",
            "packages": _digest(sorted(_distributions())),
            "variables": _digest(
                sorted(f"{k}={v}" for k, v in os.environ.items() if k.startswith(VARIABLE_PREFIXES))
            ),
            "torch": _torch_answers(torch),
        }
    return _made[key]


_made: dict[int | None, dict[str, Any]] = {}  # a process's answers do not change


def _torch_answers(torch: Any | None) -> dict[str, Any] | None:
    if torch is None and "torch" in sys.modules:
        torch = sys.modules["torch"]
    if torch is None:
        build = _version_file()
        if build is None:
            return None
        builds = [key for key in ("cuda", "hip", "xpu") if build.get(key)]
        build.pop("xpu", None)
        if sys.platform == "darwin" or may_have_device(builds, DEVICE_FILES, DRIVER_MODULES):
            torch = _import_torch()  # which devices are present only torch can say
            if torch is None:
                return None
        else:
            # A CPU-only build, or a GPU build on a Linux machine without the device files
            # its driver opens: importing torch (seconds) would only say "cpu".
            return {**build, "devices": {"cpu": True}}
    version = getattr(torch, "version", None)
    return {
        "version": getattr(torch, "__version__", None),
        "git": getattr(version, "git_version", None),
        "cuda": getattr(version, "cuda", None),
        "hip": getattr(version, "hip", None),
        "debug": getattr(version, "debug", None),
        "devices": _devices(torch),
    }


# The files a GPU build's runtime opens on Linux: NVIDIA's driver (/dev/nvidiactl,
# /dev/nvidia0, ...; Tegra's /dev/nvhost-*, /dev/nvmap), WSL's GPU (/dev/dxg), ROCm's kernel
# driver (/dev/kfd), and the DRM render nodes (/dev/dri/renderD128, ...) Intel's XPU uses.
_NODES = {
    "cuda": ("nvidia", "nvhost", "nvmap", "dxg"),
    "hip": ("kfd", "dxg"),
    "xpu": ("renderD", "dxg"),
}
# The kernel drivers behind them: a loaded one may not have made its device files yet
# (NVIDIA's are made on first use), so it counts as a device that may be present.
_DRIVERS = {
    "cuda": ("nvidia", "nvgpu", "dxgkrnl"),
    "hip": ("amdgpu", "dxgkrnl"),
    "xpu": ("i915", "xe", "dxgkrnl"),
}
DEVICE_FILES = Path("/dev")
DRIVER_MODULES = Path("/sys/module")


def may_have_device(builds: Collection[str], dev: Path, drivers: Path = DRIVER_MODULES) -> bool:
    """Whether a device of a torch build with ``builds`` support (``cuda``, ``hip``,
    ``xpu``) may be present: False only on Linux where ``dev`` shows none of the device
    files such a runtime opens and ``drivers`` (``/sys/module``) none of their kernel
    drivers; True where either cannot be listed, or elsewhere (where only torch can say)."""
    if not builds:
        return False
    if not sys.platform.startswith("linux"):
        return True
    try:
        names = os.listdir(dev)
        if "xpu" in builds and os.path.isdir(dev / "dri"):
            names += os.listdir(dev / "dri")
        loaded = set(os.listdir(drivers))
    except OSError:
        return True
    prefixes = tuple(p for build in builds for p in _NODES.get(build, ("",)))
    modules = {m for build in builds for m in _DRIVERS.get(build, ())}
    return bool(loaded & modules) or any(name.startswith(prefixes) for name in names)


def _version_file() -> dict[str, Any] | None:
    """The installed torch's build, from its ``torch/version.py`` (plain assignments)."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        return None
    try:
        tree = ast.parse(Path(locations[0], "version.py").read_bytes())
    except (OSError, SyntaxError, ValueError):
        return None
    values: dict[str, Any] = {}
    for statement in tree.body:
        target = getattr(statement, "target", None) or next(
            iter(getattr(statement, "targets", [])), None
        )
        if isinstance(target, ast.Name) and isinstance(statement.value, ast.Constant):
            values[target.id] = statement.value.value
    return {
        "version": values.get("__version__"),
        "git": values.get("git_version"),
        "cuda": values.get("cuda"),
        "hip": values.get("hip"),
        "debug": values.get("debug"),
        "xpu": values.get("xpu"),
    }


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
    """``name-version`` of every installed distribution, from the names of the metadata
    directories on sys.path (parsing each one's metadata takes half a second)."""
    found = set()
    for entry in sys.path:
        if os.path.basename(entry) not in ("site-packages", "dist-packages"):
            continue  # a source tree's own *.egg-info is not an installed package
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        found.update(n for n in names if n.endswith((".dist-info", ".egg-info")))
    return found


def _digest(items: list[str]) -> str:
    return hashlib.blake2b("\n".join(items).encode(), digest_size=12).hexdigest()
