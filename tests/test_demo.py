"""`torchtalk demo` end to end, as a new user runs it: a subprocess, no source, no index."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from pytest_torchtalk.cli.demo_cmd import BEFORE, KERNEL, PROJECT
from tests.helpers import line_of


def test_demo_indexes_changes_selects_runs_and_traces(isolated_dirs: Path, tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("PYTEST_ADDOPTS", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest_torchtalk", "demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    changed = line_of(PROJECT / KERNEL, BEFORE)
    launch = line_of(PROJECT / KERNEL, "scale_kernel<scalar_t><<<")
    assert done.stderr == ""
    # The one-line kernel change selects the two test files that reach the kernel, each
    # with its chain from the kernel to the test, and not the two that do not.
    assert "changes since main (merge-base " in out and "1 file, 1 changed entity" in out
    assert f"changed: scale_kernel @ {KERNEL}:{changed}" in out
    assert "selected 2 of 4 test files" in out
    selected = re.findall(r"^    (tests/\S+)$", out, re.M)
    assert selected == ["tests/test_layers.py", "tests/test_scale.py"]
    assert f"<- scale_cuda launches scale_kernel @ {KERNEL}:{launch}" in out
    assert "<- tests/test_scale.py::test_scale_doubles covers tinyops.ops.scale @ " in out
    # pytest ran with the plugin: the other two files were not even collected.
    assert "tests: 2 selected, 0 deselected; 2 test files ruled out, so not collected" in out
    # The trace goes from the Python name to both kernels and the CUDA launch.
    assert "tinyops::scale [op (TORCH_LIBRARY)] @ csrc/ops.cpp:" in out
    assert "CUDA: scale_cuda [kernel; registered at csrc/scale_kernel.cu:" in out
    assert f"scale_kernel [CUDA kernel launched at {KERNEL}:{launch}]" in out
    # Nothing left behind: not the repository, not an index in the user's cache.
    assert not list(tmp_path.glob("torchtalk-demo-*"))
    assert not (isolated_dirs / "cache").exists()
