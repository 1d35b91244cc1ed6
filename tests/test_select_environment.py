"""The selecting environment (indexer.record.environment): a GPU build of torch is imported
to say which devices are present only where the machine shows a device file its runtime
would open; elsewhere its answers come from its version.py, without the seconds of the
import (docs/selection.md, "Skipped, xfailed and failed tests")."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from indexer.record.environment import may_have_device

# A stand-in torch built like a CUDA wheel: its version.py names a CUDA version, and
# importing it leaves a mark (the real import takes seconds; this one says it happened).
STAND_IN_VERSION = textwrap.dedent(
    """\
    __version__ = '2.6.0+cu124'
    debug = False
    cuda = '12.4'
    git_version = 'abc123'
    hip = None
    xpu = None
    """
)
STAND_IN_INIT = textwrap.dedent(
    """\
    import os
    from pathlib import Path
    from . import version
    __version__ = version.__version__
    Path(os.environ["STAND_IN_MARK"]).write_text("imported")

    class cuda:
        @staticmethod
        def is_available():
            return True

        @staticmethod
        def device_count():
            return 1

        @staticmethod
        def get_device_name(i):
            return "Stand-in GPU"

        @staticmethod
        def get_device_capability(i):
            return (9, 0)
    """
)
ASK = textwrap.dedent(
    """\
    import json, sys
    from pathlib import Path
    from indexer.record import environment
    environment.DEVICE_FILES = Path(sys.argv[1])
    environment.DRIVER_MODULES = Path(sys.argv[1]).parent / "sys-module"
    print(json.dumps(environment.current_environment()["torch"]))
    """
)


def _answers(tmp_path: Path, device_files: list[str]) -> tuple[dict, bool]:
    """(the torch answers of a fresh process whose installed torch is the stand-in, and
    whether it imported the stand-in), on a machine whose /dev holds ``device_files``."""
    package = tmp_path / "site" / "torch"
    package.mkdir(parents=True)
    (package / "version.py").write_text(STAND_IN_VERSION)
    (package / "__init__.py").write_text(STAND_IN_INIT)
    dev = tmp_path / "dev"
    dev.mkdir()
    (tmp_path / "sys-module").mkdir()  # no GPU driver loaded
    for name in device_files:
        (dev / name).write_text("")
    mark = tmp_path / "mark"
    done = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(package.parent)!r})\n" + ASK,
         str(dev)],
        capture_output=True, text=True, check=True, env={"STAND_IN_MARK": str(mark),
                                                          "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    return json.loads(done.stdout), mark.exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="device files are Linux's")
def test_cuda_build_without_device_files_is_not_imported(tmp_path: Path) -> None:
    answers, imported = _answers(tmp_path, ["null", "tty0"])
    assert not imported
    assert answers == {"version": "2.6.0+cu124", "git": "abc123", "cuda": "12.4",
                       "hip": None, "debug": False, "devices": {"cpu": True}}  # fmt: skip


def test_cuda_build_with_a_device_file_asks_torch(tmp_path: Path) -> None:
    answers, imported = _answers(tmp_path, ["null", "nvidiactl", "nvidia0"])
    assert imported
    assert answers["devices"] == {"cpu": True, "cuda": [["Stand-in GPU", [9, 0]]]}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="device files are Linux's")
@pytest.mark.parametrize(
    ("builds", "files", "expected"),
    [
        ([], ["nvidia0"], False),  # a CPU build has no device to find
        (["cuda"], [], False),
        (["cuda"], ["nvidiactl"], True),
        (["cuda"], ["dxg"], True),  # WSL
        (["cuda"], ["kfd"], False),  # ROCm's driver does not serve a CUDA build
        (["hip"], ["kfd"], True),
        (["xpu"], ["dri/renderD128"], True),
        (["xpu"], ["dri/card0"], False),
        (["cuda"], ["nvhost-ctrl"], True),  # Tegra
        (["xpu"], ["dxg"], True),  # WSL
        (["cuda"], ["module/nvidia"], True),  # the driver loaded, its files not made yet
        (["hip"], ["module/nvidia"], False),
        (["xpu"], ["module/i915"], True),
    ],
)
def test_device_files_by_build(
    tmp_path: Path, builds: list[str], files: list[str], expected: bool
) -> None:
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    (tmp_path / "module").mkdir(exist_ok=True)
    assert may_have_device(builds, tmp_path, tmp_path / "module") is expected


def test_unlistable_device_files_ask_torch(tmp_path: Path) -> None:
    assert may_have_device(["cuda"], tmp_path / "absent", tmp_path) is True
    assert may_have_device(["cuda"], tmp_path, tmp_path / "absent") is True
