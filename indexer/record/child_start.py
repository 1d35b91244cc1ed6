"""What the start-up hook runs in a Python child of a recorded test (docs/recording.md#child-processes).

The child reports from its start (what it starts, how it ends), and observes once torch
is imported: loading the compiled recorder imports torch, and a child that never imports
torch must not be made to (its start-up time, and tests that check what a fresh
interpreter imports). Ops cannot run before torch is imported; the tree's modules already
loaded by then are named (their bodies ran in this child) but what they ran is not seen,
like the imports that precede the recording process's own start.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from indexer.record import children


def start() -> None:
    """Called from the ``.pth`` line when the environment names a recording; once."""
    if children.current() is not None or getattr(sys, "_torchtalk_child", False):
        return  # site may read the same .pth twice (a venv's lib64 link)
    sys._torchtalk_child = True
    try:
        spec = children.read_environment(os.environ[children.ENV])
        reporter = children.become_child(Path(spec["dir"]), int(spec["stretch"]))
    except Exception:  # no report: the parent marks the test unrecorded
        return
    root = Path(spec["root"])
    if "torch" in sys.modules:
        _observe(reporter, root)
    else:
        sys.meta_path.insert(0, _AfterTorch(reporter, root))


def _observe(reporter: children.Reporter, root: Path) -> None:
    from indexer.record.native import NativeUnavailable
    from indexer.record.observer import Observer

    try:
        observer = Observer(root, follow_children=False)
    except NativeUnavailable as exc:
        reporter.problems.append(f"the child's recorder is unavailable: {exc}")
        return
    except Exception as exc:
        reporter.problems.append(f"the child's recorder did not start: {exc!r}")
        return
    loaded = set()
    for module in list(sys.modules.values()):
        filename = getattr(module, "__file__", None)
        if isinstance(filename, str):
            relative = observer.tree_path(os.path.abspath(filename))
            if relative is not None and relative.endswith(".py"):
                loaded.add(("module", relative))
    with reporter.lock:  # its channel's thread may be writing a report
        reporter.names |= loaded
        reporter.observer = observer


class _AfterTorch:
    """A meta path finder that starts the observer right after ``import torch`` ends."""

    def __init__(self, reporter: children.Reporter, root: Path) -> None:
        self.reporter, self.root = reporter, root

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module):
            original(module)
            _observe(self.reporter, self.root)

        loader.exec_module = exec_module
        return spec

    def invalidate_caches(self) -> None:
        pass
