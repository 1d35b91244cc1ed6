"""Running the user's build and test commands, and reading per-test outcomes.

The test command is the user's (a pytest invocation, in a shell); the audit adds its
options through ``PYTEST_ADDOPTS``: a JUnit XML file (``xunit1``, whose test cases name
their file) and no cache provider (its ``lastfailed`` would reorder later runs). When the
suite dies without writing its XML (a segfault in a mutated kernel), the test files are
run one at a time so each failure is still attributed to its file; a file that crashes the
process fails as a whole. One file's tests are kept by a plugin the audit writes, not by
``--ignore`` alone: pytest collects a file named on the command line even when ignored.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

COLLECTION = "<collection>"  # the test id of a file that failed to import or collect
CRASH = "<crash>"  # the test id of a file whose process died


@dataclass
class CommandResult:
    returncode: int
    seconds: float
    tail: str  # the last lines of its output, for the report
    timed_out: bool = False  # killed at its time limit

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def run_command(
    command: str, cwd: Path, env: dict[str, str] | None = None, timeout: float | None = None
) -> CommandResult:
    """Run ``command`` in a shell of its own process group (all of which a timeout kills)."""
    started = time.perf_counter()
    timed_out = False
    process = subprocess.Popen(
        command,
        shell=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
        code = process.returncode
    except subprocess.TimeoutExpired:
        _kill_session(process.pid)
        output, _ = process.communicate()
        code = -signal.SIGKILL
        output += f"\n(killed after {timeout:.0f} s)".encode()
        timed_out = True
    except BaseException:
        _kill_session(process.pid)  # an interrupted audit leaves no build behind
        process.wait()
        raise
    text = output.decode("utf-8", "replace")
    tail = "\n".join(text.splitlines()[-15:])
    return CommandResult(code, time.perf_counter() - started, tail, timed_out)


def _kill_session(session: int) -> None:
    """Kill every process of the command's session: its process group, and the groups of
    their own that ninja gives each compile job (where /proc lists processes)."""
    os.killpg(session, signal.SIGKILL)
    proc = Path("/proc")
    if not proc.is_dir():
        return
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getsid(int(entry.name)) == session:
                os.kill(int(entry.name), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue


@dataclass
class Outcomes:
    """Per test id (``path::Class::test``): 'passed', 'failed', 'error' or 'skipped'."""

    results: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)  # per test id
    command: CommandResult | None = None
    per_file: bool = False  # the suite crashed and was run a file at a time
    cut: bool = False  # stopped at the caller's deadline: no result, not a failure

    @property
    def timed_out(self) -> bool:
        """The whole run was killed at its limit (no file was run on its own after it)."""
        return self.command is not None and self.command.timed_out and not self.results

    def failing(self) -> set[str]:
        return {test for test, result in self.results.items() if result in ("failed", "error")}

    @staticmethod
    def file_of(test: str) -> str:
        return test.split("::", 1)[0]

    def to_dict(self) -> dict:
        return {"results": self.results, "seconds": self.seconds, "per_file": self.per_file}


def _test_path(file: str, classname: str, tests: list[str]) -> str:
    """The repo-relative test file a JUnit case belongs to (its ``file`` is relative to
    pytest's rootdir, which need not be the tree's root)."""
    candidates = [file] if file else []
    if classname:
        parts = classname.split(".")
        candidates += ["/".join(parts[:i]) + ".py" for i in range(len(parts), 0, -1)]
    for candidate in candidates:
        if candidate in tests:
            return candidate
        for test in tests:
            if test.endswith("/" + candidate):
                return test
    return file or classname


def _inner_names(classname: str, path: str) -> str:
    """The classes of a test (``TestFoo.TestBar``) after its module in a JUnit classname,
    which spells the module from pytest's rootdir (``test.test_foo`` or ``test_foo``)."""
    parts = path[:-3].split("/") if path.endswith(".py") else [path]
    for start in range(len(parts)):
        module = ".".join(parts[start:])
        if classname == module:
            return ""
        if classname.startswith(module + "."):
            return classname[len(module) + 1 :]
    return classname


def _test_id(case: ET.Element, tests: list[str]) -> str:
    """``path::Class::test[param]`` of a JUnit test case, as pytest names its item."""
    classname = case.get("classname", "")
    path = _test_path(case.get("file", ""), classname, tests)
    if not classname:  # only a collection error has no module in its classname
        return f"{path}::{COLLECTION}"
    inner = _inner_names(classname, path)
    return "::".join(
        part for part in (path, inner.replace(".", "::"), case.get("name", "")) if part
    )


def read_junit(xml_path: Path, source: Path, tests: list[str]) -> Outcomes | None:
    """The outcomes a JUnit XML file records, or None when there is none to read."""
    try:
        root = ET.parse(xml_path).getroot()
    except (OSError, ET.ParseError):
        return None
    outcomes = Outcomes()
    for case in root.iter("testcase"):
        test = _test_id(case, tests)
        if case.find("failure") is not None:
            result = "failed"
        elif case.find("error") is not None:
            result = "error"
        elif case.find("skipped") is not None:
            result = "skipped"
        else:
            result = "passed"
        # A test erroring in teardown after passing appears twice: the worse result counts.
        if outcomes.results.get(test) not in ("failed", "error"):
            outcomes.results[test] = result
        outcomes.seconds[test] = outcomes.seconds.get(test, 0.0) + float(case.get("time") or 0)
    return outcomes


_ONE_FILE_PLUGIN = "torchtalk_audit_one_file"
_ONE_FILE_SOURCE = '''"""Written by torchtalk audit: run only the tests of $TORCHTALK_AUDIT_FILE."""
import os
from pathlib import Path


def pytest_collection_modifyitems(config, items):
    target = Path(os.environ["TORCHTALK_AUDIT_FILE"]).resolve()
    kept, dropped = [], []
    for item in items:
        (kept if Path(str(item.path)).resolve() == target else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
'''


def _addopts(xml: Path, extra: str = "") -> dict[str, str]:
    inherited = os.environ.get("PYTEST_ADDOPTS", "")
    options = (
        f"--junitxml={xml} -o junit_family=xunit1 -p no:cacheprovider "
        f"--continue-on-collection-errors {extra}"
    )
    return {"PYTEST_ADDOPTS": f"{inherited} {options}".strip()}


def run_suite(
    command: str,
    source: Path,
    tests: list[str],
    timeout: float | None = None,
    *,
    per_file_after_timeout: bool = True,
    deadline: float | None = None,
) -> Outcomes:
    """Run the whole suite once; per file when it dies before writing its report (when
    it was killed at ``timeout``, only with ``per_file_after_timeout``). No command runs
    past ``deadline`` (a ``time.monotonic()`` value): a run it stops is ``cut``."""

    def limit() -> float | None:
        if deadline is None:
            return timeout
        left = max(deadline - time.monotonic(), 1.0)
        return left if timeout is None else min(timeout, left)

    def past_deadline() -> bool:
        return deadline is not None and time.monotonic() >= deadline

    with tempfile.TemporaryDirectory(prefix="torchtalk-audit-") as scratch:
        xml = Path(scratch) / "junit.xml"
        result = run_command(command, source, _addopts(xml), limit())
        outcomes = read_junit(xml, source, tests)
        if outcomes is not None:
            outcomes.command = result
            return outcomes
        if result.timed_out and past_deadline():
            return Outcomes(command=result, cut=True)
        if result.timed_out and not per_file_after_timeout:
            return Outcomes(command=result)
        outcomes = Outcomes(command=result, per_file=True)
        (Path(scratch) / f"{_ONE_FILE_PLUGIN}.py").write_text(_ONE_FILE_SOURCE)
        path = os.pathsep.join(p for p in (scratch, os.environ.get("PYTHONPATH", "")) if p)
        for number, test_file in enumerate(tests):
            if past_deadline():
                return Outcomes(command=result, per_file=True, cut=True)
            ignored = " ".join(f"--ignore={t}" for t in tests if t != test_file)
            xml = Path(scratch) / f"junit-{number}.xml"
            env = _addopts(xml, f"{ignored} -p {_ONE_FILE_PLUGIN}")
            env |= {"PYTHONPATH": path, "TORCHTALK_AUDIT_FILE": str(source / test_file)}
            one = run_command(command, source, env, limit())
            read = read_junit(xml, source, tests)
            if read is None:
                if one.timed_out and past_deadline():
                    return Outcomes(command=result, per_file=True, cut=True)
                outcomes.results[f"{test_file}::{CRASH}"] = "failed"
                outcomes.seconds[f"{test_file}::{CRASH}"] = one.seconds
                continue
            outcomes.results.update(read.results)
            outcomes.seconds.update(read.seconds)
        return outcomes
