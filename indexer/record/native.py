"""The recorder's compiled half (``native_recorder.cpp``): built on first use, then reused.

A RecordFunction callback must be compiled against the very torch it observes, so the
library is built here, once per (torch build, Python, source of the recorder), with the
C++ compiler and torch's own headers, and kept in the cache (written to a temporary file
and renamed). It is loaded with ``ctypes.PyDLL``: its functions take and return Python
objects and run with the GIL held. Nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path

from indexer.errors import TorchTalkError
from indexer.locations import cache_dir

SOURCE = Path(__file__).with_name("native_recorder.cpp")
_lock = threading.Lock()
_loaded: ctypes.PyDLL | None = None


class NativeUnavailable(TorchTalkError):
    """The compiled recorder cannot be built or loaded here (no compiler, no torch...)."""


def _compiler() -> str | None:
    for name in (os.environ.get("CXX", ""), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return name
    return None


def _build_key(torch) -> str:
    digest = hashlib.blake2b(digest_size=10)
    for part in (
        SOURCE.read_bytes(),
        torch.__version__.encode(),
        str(Path(torch.__file__).resolve()).encode(),
        sys.version.encode(),
        str(torch._C._GLIBCXX_USE_CXX11_ABI).encode(),
    ):
        digest.update(part + b"\0")
    return digest.hexdigest()


def compile_against_torch(torch, source: Path, target: Path) -> None:
    """Compile ``source`` into the shared library ``target`` against ``torch``'s headers
    and libraries (written to a temporary file, then renamed)."""
    compiler = _compiler()
    if compiler is None:
        raise NativeUnavailable("no C++ compiler (c++, g++ or clang++) on PATH")
    torch_dir = Path(torch.__file__).resolve().parent
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    last_error = ""
    for standard in ("c++20", "c++17"):  # torch 2.6 builds with 17, newer headers want 20
        command = [
            compiler, f"-std={standard}", "-O2", "-shared", "-fPIC", "-w",
            f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
            f"-I{torch_dir / 'include'}", f"-I{sysconfig.get_paths()['include']}",
            str(source), f"-L{torch_dir / 'lib'}", "-lc10", "-ltorch_cpu",
            f"-Wl,-rpath,{torch_dir / 'lib'}", "-o", str(tmp),
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode == 0:
            os.replace(tmp, target)
            return
        lines = done.stderr.strip().splitlines()
        last_error = lines[-1] if lines else f"exit {done.returncode}"
    tmp.unlink(missing_ok=True)
    raise NativeUnavailable(f"{source.name} did not compile with {compiler}: {last_error}")


def load() -> ctypes.PyDLL:
    """The loaded library (built first if needed); NativeUnavailable saying why not."""
    global _loaded
    with _lock:
        if _loaded is not None:
            return _loaded
        try:
            import torch
        except ImportError:
            raise NativeUnavailable("torch is not importable in this environment") from None
        directory = cache_dir() / "recorder"
        target = directory / f"recorder-{_build_key(torch)}.so"
        if not target.is_file():
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise NativeUnavailable(f"cannot create {directory}: {exc}") from None
            compile_against_torch(torch, SOURCE, target)
        try:
            library = ctypes.PyDLL(str(target))
        except OSError as exc:
            raise NativeUnavailable(f"cannot load {target}: {exc}") from None
        _loaded = _declared(library)
        return library


def load_python_only(directory: Path) -> ctypes.PyDLL:
    """The recorder's Python observation alone (``TT_PYTHON_ONLY``: no ops, no devices),
    built for this interpreter without torch (once per source and Python in
    ``directory``), and loaded as the library ``load`` returns from then on: the tests of
    the Python backends run it where torch is not installed."""
    global _loaded
    compiler = _compiler()
    if compiler is None:
        raise NativeUnavailable("no C++ compiler (c++, g++ or clang++) on PATH")
    key = hashlib.blake2b(SOURCE.read_bytes() + b"\0" + sys.version.encode(), digest_size=10)
    target = directory / f"python-only-{key.hexdigest()}.so"
    if not target.is_file():
        tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
        command = [
            compiler, "-std=c++17", "-O2", "-shared", "-fPIC", "-w", "-DTT_PYTHON_ONLY",
            f"-I{sysconfig.get_paths()['include']}", str(SOURCE), "-o", str(tmp),
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise NativeUnavailable(f"{SOURCE.name} (Python only) did not compile: {done.stderr}")
        os.replace(tmp, target)
    with _lock:
        _loaded = _declared(ctypes.PyDLL(str(target)))
        return _loaded


def _declared(library: ctypes.PyDLL) -> ctypes.PyDLL:
    """Declares the C signatures ctypes needs to call the library."""
    for name in (
        "tt_close_epoch", "tt_drain_codes", "tt_drain_cfuncs", "tt_unobserved_ops",
        "tt_monitoring_callbacks",
    ):  # fmt: skip
        getattr(library, name).restype = ctypes.py_object
    library.tt_monitoring_on.argtypes = [ctypes.py_object] * 4
    library.tt_monitoring_on.restype = ctypes.c_int
    library.tt_monitoring_off.restype = None
    library.tt_monitoring_restart_failed.restype = ctypes.c_int
    library.tt_observe_thread.argtypes = [ctypes.py_object]
    library.tt_observe_thread.restype = None
    library.tt_stop_thread.restype = None
    library.tt_step_aside.restype = ctypes.c_int
    library.tt_start_devices.restype = ctypes.c_int
    library.tt_set_module_callback.argtypes = [ctypes.py_object]
    library.tt_set_module_callback.restype = None
    library.tt_forget_code_names.restype = None
    library.tt_name_codes.argtypes = [ctypes.py_object, ctypes.py_object]
    library.tt_name_codes.restype = ctypes.c_int
    library.tt_quiet.argtypes = [ctypes.c_int]
    library.tt_quiet.restype = None
    return library


@contextlib.contextmanager
def quiet():
    """The recorder's own work, unobserved: the calling thread's profile function is
    suspended meanwhile (where the library is loaded), so that this work costs what it
    costs without a recorder (docs/recording.md#cost). Nothing of the tree may run in it."""
    library = _loaded
    if library is None:
        yield
        return
    library.tt_quiet(1)
    try:
        yield
    finally:
        library.tt_quiet(0)
