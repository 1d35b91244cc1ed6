"""``pytest --torchtalk-record[=PATH]``: record what each test really executes.

Each test is observed from the start of its setup to the end of its teardown. Work that
is done once for many tests is cut out into its own segment and linked to every test that
depends on it: a class-, module- or session-scoped fixture's setup (to each test whose
fixture closure holds it), a test file's collection (its imports, to each of its tests)
and the session's start (to all). So a test that runs second in a module is not recorded
as doing less than the first.

Under pytest-xdist each worker records its own tests into a part file the controller
names; the controller merges the parts into one record when the workers are done.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

import pytest

from indexer.errors import TorchTalkError
from indexer.query.recorded import record_path_for
from indexer.record import native, storage
from indexer.record.cuda_capture import KernelCapture, capture_off_reason
from indexer.record.files import content_hashes
from indexer.record.merge import merge
from indexer.record.model import Record, RecordedTest
from indexer.record.observer import Observed, Observer
from indexer.select.environment import current_environment
from indexer.snapshot.fingerprint import full_commit
from indexer.workspace import Workspace

WORKER_INPUT = "torchtalk_record_part"
SESSION_LABEL = "session"


def record_path_option(config: pytest.Config) -> str | None:
    """The record path asked for ('' for the default), or None when recording is off."""
    value = config.getoption("--torchtalk-record")
    if value is not None:
        return value
    ini = str(config.getini("torchtalk_record") or "").strip()
    if not ini or ini.lower() in ("0", "false", "no", "off"):
        return None
    return "" if ini.lower() in ("1", "true", "yes", "on") else ini


def default_record_path(workspace: Workspace) -> Path:
    return record_path_for(workspace.db_path)


class _Outcome:
    def __init__(self) -> None:
        self.outcome = "passed"
        self.duration = 0.0

    def update(self, report: pytest.TestReport) -> None:
        self.duration += report.duration
        wasxfail = hasattr(report, "wasxfail")
        if report.failed:
            self.outcome = "failed" if report.when == "call" else "error"
        elif report.skipped and self.outcome == "passed":
            self.outcome = "xfailed" if wasxfail else "skipped"
        elif report.passed and wasxfail and report.when == "call":
            self.outcome = "xpassed"


class RecordRun:
    """The plugin object registered by ``pytest_torchtalk.plugin`` when recording is on."""

    def __init__(self, config: pytest.Config, workspace: Workspace, path: Path) -> None:
        self.config = config
        self.workspace = workspace
        self.root = workspace.source
        self.path = path
        worker_input = getattr(config, "workerinput", None)
        self.part = worker_input.get(WORKER_INPUT) if worker_input else None
        self.is_worker = worker_input is not None
        self.is_controller = False  # known at session start, once xdist has configured
        self.parts_dir: Path | None = None
        self.record = Record(meta={})
        self.observer: Observer | None = None
        self.unavailable = ""
        self.kernels: KernelCapture | None = None
        self.kernels_off = "off: the recorder is unavailable"  # why kernels are not captured
        self.problems: list[str] = []
        self._session = self.record.add_segment("session", SESSION_LABEL)
        self._files: dict[str, int] = {}  # test file -> its collection segment
        self._imports: dict[str, int] = {}  # module path -> its import work's segment
        self._fixtures: dict[int, list[int]] = defaultdict(list)  # id(fixturedef) -> segments
        self._stack: list[int] = []  # segments being recorded, innermost last
        self._problems: dict[int, list[str]] = defaultdict(list)  # segment -> problems
        self._outcomes: dict[str, _Outcome] = {}
        self._started = datetime.now(timezone.utc).isoformat(timespec="seconds")

    # --- start and stop ---------------------------------------------------------------

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if session.config.pluginmanager.hasplugin("dsession"):
            self._parts_dir()
            return
        try:
            self.observer = Observer(self.root)
        except native.NativeUnavailable as exc:
            self.unavailable = f"recorder unavailable: {exc}"
            return
        torch = sys.modules.get("torch")  # imported by the compiled recorder's load
        self.kernels_off = capture_off_reason(torch)
        if not self.kernels_off:
            self.kernels = KernelCapture(torch)

    def _take(self, segment: int) -> None:
        """Add what ran since the last look to ``segment``."""
        if self.observer is None:
            return
        self._add(segment, self.observer.close())
        for path, observed in self.observer.take_imports().items():
            found = self._imports.get(path)
            if found is None:
                found = self._imports[path] = self.record.add_segment("module", path)
            self._add(found, observed)

    def _add(self, segment: int, observed: Observed) -> None:
        names = self.record.segments[segment].names
        for name in observed.names:
            names.add(self.record.name_id(*name))
        self._problems[segment].extend(observed.problems)

    # --- collection: a test file's imports --------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector):
        if self.observer is None or not isinstance(collector, pytest.Module):
            return (yield)
        self._take(self._session)
        try:
            return (yield)
        finally:
            file = self._relative(Path(collector.path))
            segment = self._files.get(file)
            if segment is None:
                segment = self._files[file] = self.record.add_segment("file", f"file {file}")
            self._take(segment)
            module = getattr(collector, "_obj", None)
            if module is not None:
                names = self.record.segments[segment].names
                names.update(self.record.name_id(*n) for n in self.observer.imported_by(module))

    def _add_kernels(self, segment: int, launches, problems: list[str]) -> None:
        names = self.record.segments[segment].names
        names.update(self.record.name_id("kernel", launch.kernel) for launch in launches)
        if launches:
            names.add(self.record.name_id("device", "cuda"))
        self._problems[segment].extend(problems)

    # --- tests and the fixtures they share --------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem):
        if self.observer is None:
            self._outcomes.setdefault(item.nodeid, _Outcome())
            return (yield)
        if not self._outcomes:
            self._take(self._session)
        else:
            self.observer.close()  # the gap between two tests is no test's work
        own = self.record.add_segment("test", item.nodeid)
        self._outcomes.setdefault(item.nodeid, _Outcome())
        self._stack = [own]
        if self.kernels is not None:
            self.kernels.start()
        try:
            return (yield)
        finally:
            if self.kernels is not None:
                self._add_kernels(own, *self.kernels.stop())
            self._take(own)
            self._stack = []
            lost = self.observer.check_ops()
            if lost:
                self._problems[own].append(lost)
            self._finish(item, own)

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        if self.observer is None or fixturedef.scope == "function" or not self._stack:
            return (yield)
        self._take(self._stack[-1])
        label = f"fixture {fixturedef.argname} @ {fixturedef.baseid or '(session)'}"
        if hasattr(request, "param"):  # by position: a repr may differ between processes
            label += f" [{getattr(request, 'param_index', 0)}]"
        segment = self.record.add_segment("fixture", label)
        self._fixtures[id(fixturedef)].append(segment)
        self._stack.append(segment)
        try:
            return (yield)
        finally:
            self._take(segment)
            self._stack.pop()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        outcome = self._outcomes.get(report.nodeid)
        if outcome is not None and not self.is_controller:
            outcome.update(report)

    def _finish(self, item: pytest.Item, own: int) -> None:
        file = self._relative(Path(item.path))
        segments = [self._session, own]
        if file in self._files:
            segments.append(self._files[file])
        info = getattr(item, "_fixtureinfo", None)
        for definitions in getattr(info, "name2fixturedefs", {}).values():
            for definition in definitions:
                segments.extend(self._fixtures.get(id(definition), ()))
        problems = [p for s in segments for p in self._problems.get(s, ())]
        outcome = self._outcomes[item.nodeid]
        self.record.tests.append(
            RecordedTest(
                nodeid=item.nodeid,
                file=file,
                outcome=outcome.outcome,
                duration=round(outcome.duration, 4),
                segments=segments,
                unrecorded="; ".join(sorted(set(problems))),
            )
        )

    def _relative(self, path: Path) -> str:
        try:
            return path.resolve().relative_to(self.root).as_posix()
        except ValueError:
            return path.as_posix()

    # --- xdist ------------------------------------------------------------------------

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        node.workerinput[WORKER_INPUT] = str(self._parts_dir() / f"part-{node.gateway.id}.ttr")

    def _parts_dir(self) -> Path:
        # Made here too: xdist may set up its nodes before our session start hook runs.
        self.is_controller = True
        if self.parts_dir is None:
            self.parts_dir = Path(tempfile.mkdtemp(prefix="torchtalk-record-"))
        return self.parts_dir

    # --- the record -------------------------------------------------------------------

    def _meta(self) -> dict:
        torch = sys.modules.get("torch")
        meta = {
            "commit": full_commit(self.root),
            "started_at": self._started,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "harness": self.workspace.harness,
            "python": ".".join(map(str, sys.version_info[:3])),
            "torch": getattr(torch, "__version__", None),
            "devices": _devices(torch),
            # What skip and xfail decisions read: a selection on the same one decides them.
            "environment": current_environment(torch),
            "mechanisms": {
                "ops": "RecordFunction global callback",
                "python": "C profile function (PyEval_SetProfile)",
                "cuda_kernels": self.kernels_off or "Kineto CUDA activity, a session per test",
                "devices": (
                    self.observer.devices_how
                    if self.observer
                    else "off: the recorder is unavailable"
                ),
            },
            "parts": 1,
            "problems": [self.unavailable] if self.unavailable else [],
        }
        if self.observer is not None:
            meta["unobserved_ops"] = self.observer.unobserved_ops()
        return meta

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_controller:
            self._merge_parts()
        else:
            self._write(session)
        # A run asked to record that leaves no record must not pass for one that did.
        if self.problems and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR

    def _write(self, session: pytest.Session) -> None:
        if self.observer is not None:
            self._take(self._session)  # what session teardown imported
            self.observer.stop()
        if self.kernels is not None:
            self.kernels.close()
        self._add_unobserved(session)
        if self.unavailable:
            for test in self.record.tests:
                test.unrecorded = self.unavailable
        self.record.meta = self._meta()
        self.record.files = content_hashes(self.root, self.record)
        target = Path(self.part) if self.part else self.path
        try:
            storage.write(self.record, target)
        except TorchTalkError as exc:
            self.problems.append(str(exc))
        except OSError as exc:  # the directory cannot be made
            self.problems.append(f"cannot write the record {target}: {exc.strerror or exc}")

    def _add_unobserved(self, session: pytest.Session) -> None:
        # Without the compiled recorder no test went through the protocol hook's recording.
        if self.observer is not None:
            return
        for item in session.items:
            outcome = self._outcomes.get(item.nodeid)
            if outcome is not None:
                self._finish(item, self.record.add_segment("test", item.nodeid))

    def _merge_parts(self) -> None:
        assert self.parts_dir is not None  # set with is_controller
        try:
            parts = [storage.read(p) for p in sorted(self.parts_dir.glob("part-*.ttr"))]
            if not parts:
                self.problems.append("no worker wrote a record")
                return
            self.record = merge(parts)
            storage.write(self.record, self.path)
        except TorchTalkError as exc:
            self.problems.append(str(exc))
        except OSError as exc:
            self.problems.append(f"cannot write the record {self.path}: {exc.strerror or exc}")
        finally:
            shutil.rmtree(self.parts_dir, ignore_errors=True)

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int, config) -> None:
        if self.is_worker:
            return
        terminalreporter.section("torchtalk record")
        for problem in self.problems:
            terminalreporter.write_line(f"torchtalk: record not written: {problem}", red=True)
        if self.problems:
            return
        tests = self.record.tests
        unrecorded = sum(1 for t in tests if t.unrecorded)
        line = f"recorded {len(tests)} test{'s' if len(tests) != 1 else ''} to {self.path}"
        if unrecorded:
            line += f" ({unrecorded} unrecorded: {_first_reason(tests)})"
        terminalreporter.write_line(line)


def _devices(torch) -> list[str]:
    """The device types this run could use: a CUDA test skipped here ran nothing here."""
    devices = ["cpu"]
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and cuda.is_available():
        devices.append("cuda")
    return devices


def _first_reason(tests: list[RecordedTest]) -> str:
    return next(t.unrecorded for t in tests if t.unrecorded)
