"""The recorder's two ways of observing Python give the same record.

Python 3.12 and later are observed through sys.monitoring (events disabled once seen in a
window, restarted at each drain), 3.10 and 3.11 through the C profile function
(docs/recording.md#sysmonitoring). Both run for real here, on the pybackends fixture
(pure Python: calls, builtin methods of the tree's types, one call site calling several
C functions, generators resumed and thrown into, imports that run functions already seen,
an import that fails, a thread, the recorder's own work), window by window, and each is
checked against what the fixture does and against the other.

The workload needs no torch: the recorder is built without its op observer
(``TT_PYTHON_ONLY``), so the sys.monitoring check runs wherever a Python 3.12 is found,
CI's machine included (its tests run on 3.11, beside a 3.12 without torch). Where the
suite itself runs on 3.12 with torch, a recorded pytest run is compared too.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from indexer.record import storage
from tests.helpers import FIXTURES
from tests.record_support import (
    build_recext_library,
    libraries,
    make_recext_repo,
    recext_env,
    require_torch,
    run_pytest,
)

pytestmark = pytest.mark.xdist_group("recorded-runs")
ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = Path(__file__).with_name("python_backends_workload.py")
TREE = FIXTURES / "pybackends"
PY312 = (Path("/root/.pyenv/versions/3.12.1/bin/python"), "python3.12")
INIT = "pyb/__init__.py"


def _f(name: str) -> list[str]:
    return ["function", f"{INIT}:{name}"]


def _b(name: str) -> list[str]:
    return ["binding", f"pyb.Bag.{name}"]


# What each window ran, from the fixture's code (pyb/__init__.py and the workload).
DOUBLE = [_f("double"), _f("helper")]
EXPECTED = {
    "import": [["module", INIT]],
    "calls": [_b("append"), _b("extend"), *DOUBLE],
    "calls again": [_b("append"), *DOUBLE],
    "one site, several C functions": [_b("append"), _b("count"), _b("remove"), _f("call_each")],
    "one site, Python then C": [_b("append"), _f("call_each"), _f("helper")],
    "an exception": [_f("fails")],
    "a generator starts": [_f("counter"), _f("step")],
    "a generator resumes": [_f("counter"), _f("step")],
    "a generator to throw into": [_f("catcher")],
    "thrown into": [_f("after_throw"), _f("catcher")],
    "an import after its body's functions ran": [*DOUBLE, _f("step"), ["module", "pyb/loaded.py"]],
    "an import that fails": [_f("after_throw"), ["module", "pyb/broken.py"]],
    "a thread": [*DOUBLE, _f("in_thread")],
    "the recorder's own work": [_f("step")],
    "after the profile function was replaced": DOUBLE,
}
# The modules' import work: what each body ran, whoever ran it first in the window.
IMPORTS = {
    INIT: [_f("Bag"), ["module", INIT]],
    "pyb/loaded.py": [*DOUBLE, ["module", INIT], ["module", "pyb/nested.py"]],
    "pyb/nested.py": [_f("helper"), ["module", INIT]],
    "pyb/broken.py": [_f("step"), ["module", INIT]],
}
REPLACED = "the profile function was replaced (sys.setprofile)"
CHILD_REPLACED = "a live child replaced its profile function (sys.setprofile)"
# Windows where the two ways differ by design: what disturbs one does not touch the other.
# (window, problems with the profile function, problems with sys.monitoring)
DISTURBED = [
    ("the profile function replaced", [REPLACED], []),
    ("sys.monitoring events turned off", [], ["sys.monitoring events of tool id 4 were changed"]),
    ("the tool id freed", [], ["sys.monitoring tool id 4 was freed (sys.monitoring.free_tool_id)"]),
    (
        "the tool id taken",
        [],
        ["sys.monitoring tool id 4 was taken by 'another tool': Python functions are not observed"],
    ),
    (
        "after the tool id was given back",
        [],
        ["sys.monitoring tool id 4 was freed (sys.monitoring.free_tool_id)"],
    ),
]


def _python_with_monitoring() -> str | None:
    if sys.version_info >= (3, 12):
        return sys.executable
    for candidate in PY312:
        found = shutil.which(str(candidate))
        if found:
            return found
    return None


def _run_workload(python: str, backend: str, tmp: Path, *options: str) -> dict:
    """The workload's windows in a child ``python`` (torch-free build of the recorder)."""
    deps = tmp / "deps"
    if not deps.exists():  # the one third-party module the recorder imports, pure Python
        spec = importlib.util.find_spec("platformdirs")
        assert spec is not None and spec.origin is not None
        shutil.copytree(Path(spec.origin).parent, deps / "platformdirs")
    build = tmp / "build"
    build.mkdir(exist_ok=True)
    out = tmp / f"{backend}{'-'.join(options)}.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(deps)]),
        "TORCHTALK_RECORD_PYTHON": backend,
        "TORCHTALK_CACHE_DIR": str(tmp / "cache"),
    }
    command = [python, str(WORKLOAD), str(TREE), str(build), str(out), "--python-only", *options]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(out.read_text())


def _check_against_the_fixture(seen: dict, skip: set[str]) -> None:
    for name, expected in EXPECTED.items():
        window = seen["windows"][name]
        assert window == {"names": expected, "problems": []}, name
    for name, window in seen["windows"].items():
        if name not in skip and name not in EXPECTED:
            assert window["problems"] == [], name
    assert seen["imports"] == IMPORTS


def test_the_profile_function_sees_what_the_fixture_runs(tmp_path: Path) -> None:
    require_compiler()
    seen = _run_workload(sys.executable, "profile", tmp_path)
    assert seen["how"] == "C profile function (PyEval_SetProfile)"
    _check_against_the_fixture(seen, {name for name, _, _ in DISTURBED})
    assert seen["windows"]["the profile function replaced"] == {"names": [], "problems": [REPLACED]}
    assert seen["child_disturbed"] == CHILD_REPLACED


def test_sys_monitoring_gives_what_the_profile_function_gives(tmp_path: Path) -> None:
    require_compiler()
    python = _python_with_monitoring()
    if python is None:
        pytest.skip(f"no Python 3.12 or later here (looked for {PY312}): sys.monitoring untested")
    profile = _run_workload(python, "profile", tmp_path)
    (built,) = (tmp_path / "build").glob("*.so")
    first = built.stat().st_mtime_ns
    monitoring = _run_workload(python, "monitoring", tmp_path)
    assert built.stat().st_mtime_ns == first, "the same source was compiled again"
    assert monitoring["how"].startswith("sys.monitoring (tool id 4")
    disturbed = {name for name, _, _ in DISTURBED}
    _check_against_the_fixture(monitoring, disturbed)
    for name, window in profile["windows"].items():
        if name not in disturbed:
            assert monitoring["windows"][name] == window, name
    assert monitoring["imports"] == profile["imports"]
    for name, with_profile, with_monitoring in DISTURBED:
        assert profile["windows"][name]["problems"] == with_profile, name
        assert monitoring["windows"][name]["problems"] == with_monitoring, name
    # sys.setprofile does not touch sys.monitoring: that window is observed whole.
    assert monitoring["windows"]["the profile function replaced"]["names"] == DOUBLE
    # ... nor a live child's report (children.py): it stays whole where the profile
    # function's is disturbed.
    assert profile["child_disturbed"] == CHILD_REPLACED
    assert monitoring["child_disturbed"] == ""
    assert monitoring["windows"]["sys.monitoring events turned off"]["names"] == []


def test_a_tool_id_held_by_another_tool_falls_back_to_the_profile_function(
    tmp_path: Path,
) -> None:
    require_compiler()
    python = _python_with_monitoring()
    if python is None:
        pytest.skip(f"no Python 3.12 or later here (looked for {PY312}): sys.monitoring untested")
    fallback = _run_workload(python, "", tmp_path, "--hold", "coverage-like")
    held = "sys.monitoring tool id 4 is held by 'coverage-like'"
    assert fallback["how"] == f"C profile function (PyEval_SetProfile): {held}"
    _check_against_the_fixture(fallback, {name for name, _, _ in DISTURBED})
    forced = _run_workload(python, "monitoring", tmp_path, "--hold", "coverage-like")
    assert forced == {"unavailable": f"TORCHTALK_RECORD_PYTHON=monitoring: {held}"}


def require_compiler() -> None:
    from indexer.record.native import _compiler

    if _compiler() is None:
        pytest.skip("the recorder needs a C++ compiler (c++, g++ or clang++)")


def _recorded(tmp_path_factory: pytest.TempPathFactory, backend: str) -> storage.Record:
    base = tmp_path_factory.mktemp(f"recext-{backend}")
    library = build_recext_library(libraries(tmp_path_factory))
    repo = make_recext_repo(base / "recext")
    env = {**recext_env(base, library, repo), "TORCHTALK_RECORD_PYTHON": backend}
    run_pytest(repo, "--torchtalk-record-to=record.ttr", env=env)
    return storage.read(repo / "record.ttr")


def test_a_recorded_run_is_the_same_either_way(tmp_path_factory: pytest.TempPathFactory) -> None:
    if sys.version_info < (3, 12):
        pytest.skip(
            "this suite runs on Python 3.11, whose torch cannot run sys.monitoring: the "
            "torch-free check above compares the two ways on a 3.12 where one is found"
        )
    require_torch()
    records = {
        backend: _recorded(tmp_path_factory, backend) for backend in ("profile", "monitoring")
    }

    def content(record: storage.Record) -> dict:
        tests = {
            t.nodeid: (
                t.outcome,
                bool(t.unrecorded),
                sorted(record.names[n] for n in record.names_of(t)),
            )
            for t in record.tests
        }
        imports = {
            s.label: sorted(record.names[n] for n in s.names) for s in record.segments
            if s.kind == "module"
        }  # fmt: skip
        return {"tests": tests, "imports": imports}

    profile, monitoring = (content(records[b]) for b in ("profile", "monitoring"))
    assert len(profile["tests"]) >= 15 and profile["imports"]
    assert monitoring == profile
    how = records["monitoring"].meta["mechanisms"]["python"]
    assert how.startswith("sys.monitoring (tool id 4"), how
