"""``pytest --torchtalk-record`` / ``--torchtalk-record-to=PATH``: record what each test
really executes.

Each test is observed from the start of its setup to the end of its teardown. Work that
is done once for many tests is cut out into its own segment and linked to every test that
depends on it: a class-, module- or session-scoped fixture's setup (to each test whose
fixture closure holds it), a test file's collection (its imports, to each of its tests)
and the session's start (to all). So a test that runs second in a module is not recorded
as doing less than the first.

Each test reaches disk as it ends: every recording process appends to its own journal
(``indexer.record.journal``) in ``<record>.journal/``, which becomes the record at the
session's end; a run stopped before (SIGTERM, SIGKILL, a timeout) leaves the tests that
finished, for ``torchtalk record finalize``. Under pytest-xdist each worker keeps its own
journal and the controller finalizes them all (docs/recording.md#durable-recording).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path

import pytest

from indexer.errors import TorchTalkError
from indexer.query.recorded import record_path_for
from indexer.record import journal, native, storage
from indexer.record.cuda_capture import KernelCapture, capture_off_reason
from indexer.record.environment import current_environment
from indexer.record.files import dirty_files
from indexer.record.model import INTERRUPTED, Record, RecordedTest
from indexer.record.observer import Observed, Observer
from indexer.snapshot.fingerprint import full_commit
from indexer.workspace import Workspace

WORKER_INPUT = "torchtalk_record_journals"  # the journal directory, named by the controller
TREE_INPUT = "torchtalk_record_tree"  # the tree's commit and uncommitted state, read once

SESSION_LABEL = "session"


def tree_state(
    config: pytest.Config, root: Path
) -> tuple[str | None, dict[str, str | None] | None]:
    """The tree's commit and uncommitted files (``dirty_files``): under xdist the
    controller's, handed to each worker, so git runs once per session, not per worker."""
    given = getattr(config, "workerinput", {}).get(TREE_INPUT)
    if given:
        state = json.loads(given)
        return state["commit"], state["dirty"]
    return full_commit(root), dirty_files(root)


def record_path_option(config: pytest.Config) -> str | None:
    """The record path asked for ('' for the default), or None when recording is off."""
    value = config.getoption("--torchtalk-record-to")
    if value:
        return value
    if config.getoption("--torchtalk-record"):
        return ""
    ini = str(config.getini("torchtalk_record") or "").strip()
    if not ini or ini.lower() in ("0", "false", "no", "off"):
        return None
    return "" if ini.lower() in ("1", "true", "yes", "on") else ini


def default_record_path(workspace: Workspace) -> Path:
    return record_path_for(workspace.db_path)


def refuse_record_path(path: Path) -> str | None:
    """Why ``path`` cannot take a record, checked before any test runs; None when it can.
    Its journal directory is made here (which also shows that it can be written)."""
    if path.is_dir():
        return f"the record path {path} is a directory"
    if (path.exists() or path.is_symlink()) and not (path.is_file() and journal.is_record(path)):
        return f"{path} exists and is not a TorchTalk record: not overwriting it"
    directory = journal.journal_dir(path)
    left = journal.journals_in(directory)
    if left:
        running = next((pid for p in left if (pid := journal.running_pid(p))), None)
        if running:
            return f"a run (pid {running}) is recording to {path} now"
        return (
            f"{directory} holds the journals of a run that did not finish: "
            f"'torchtalk record finalize {directory}' makes them its record (or remove them)"
        )
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot write the record {path}: {exc.strerror or exc}"
    if not os.access(directory, os.W_OK) or not os.access(path.parent, os.W_OK):
        return f"cannot write the record {path}: its directory is not writable"
    return None


class _Terminated(KeyboardInterrupt):
    """SIGTERM, stopping the session as Ctrl-C does (exit status 2, interrupted), so that
    it ends with the record of the tests that finished. A KeyboardInterrupt, not pytest's
    Exit: test code's ``except Exception`` (PyTorch has many) would swallow an Exit."""


_terminated: list[bool] = []  # set by the handler: raised again before the next test
_watching: list[int] = []  # the pid of the pytest process whose SIGTERM is ours


def _on_sigterm(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM kills at once
    if os.getpid() not in _watching:
        # A forked child (a fork pool's worker, a test's os.fork) inherits the handler:
        # SIGTERM ends it as it would have, never runs pytest's session on in the child.
        os.kill(os.getpid(), signal.SIGTERM)
        return
    _terminated.append(True)
    raise _Terminated("SIGTERM")


def _interruption(exc: BaseException) -> str:
    if isinstance(exc, _Terminated):
        return "SIGTERM"
    if isinstance(exc, KeyboardInterrupt):
        return "KeyboardInterrupt (SIGINT)"
    if isinstance(exc, pytest.exit.Exception):
        return f"pytest.exit: {exc.msg}"
    return f"{type(exc).__name__}: {exc}"


TIMEOUT_MARK = "from pytest-timeout."  # its failure message: 'Timeout (>5.0s) from pytest-timeout.'


class _Outcome:
    def __init__(self) -> None:
        self.outcome = "passed"
        self.duration = 0.0
        self.interrupted = ""  # why the test was stopped before its end

    def update(self, report: pytest.TestReport) -> None:
        self.duration += report.duration
        wasxfail = hasattr(report, "wasxfail")
        if report.failed:
            self.outcome = "failed" if report.when == "call" else "error"
            if TIMEOUT_MARK in report.longreprtext:
                self.interrupted = "timed out (pytest-timeout)"
        elif report.skipped and self.outcome == "passed":
            self.outcome = "xfailed" if wasxfail else "skipped"
        elif report.passed and wasxfail and report.when == "call":
            self.outcome = "xpassed"


class RecordRun:
    """The plugin object registered by ``pytest_torchtalk.plugin`` when recording is on."""

    def __init__(
        self,
        config: pytest.Config,
        workspace: Workspace,
        path: Path,
        tree: tuple[str | None, dict[str, str | None] | None] | None = None,
    ) -> None:
        self.config = config
        self.workspace = workspace
        self.root = workspace.source
        self.path = path
        worker_input = getattr(config, "workerinput", None)
        self.part = worker_input.get(WORKER_INPUT) if worker_input else None
        self.is_worker = worker_input is not None
        self.is_controller = False  # known at session start, once xdist has configured
        self.journal_dir = (
            Path(worker_input[WORKER_INPUT]) if self.part else journal.journal_dir(path)
        )
        self.journal: journal.JournalWriter | None = None
        self._pending: dict[int, list[int]] = defaultdict(list)  # names not yet journaled
        self._interrupted = ""  # why the session stopped before its end
        self._sigterm = None  # the SIGTERM handler ours replaced
        self._tree = tree  # the tree's commit and uncommitted files: read once
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
            self.is_controller = True
            self._watch_sigterm()
            return
        try:
            self.observer = Observer(self.root)
        except native.NativeUnavailable as exc:
            self.unavailable = f"recorder unavailable: {exc}"
        if self.observer is not None:
            torch = sys.modules.get("torch")  # imported by the compiled recorder's load
            self.kernels_off = capture_off_reason(torch)
            if not self.kernels_off:
                self.kernels = KernelCapture(torch)
        self._start_journal()
        self._watch_sigterm()

    def _start_journal(self) -> None:
        meta = self._meta()
        meta["dirty"] = self._tree_state()[1]
        if meta["dirty"] is None:
            del meta["dirty"]
        worker = getattr(self.config, "workerinput", {}).get("workerid")
        name = f"{worker}-{os.getpid()}" if worker else str(os.getpid())
        try:
            self.journal_dir.mkdir(parents=True, exist_ok=True)
            path = self.journal_dir / f"{name}{journal.SUFFIX}"
            self.journal = journal.JournalWriter(path, self.root, meta)
        except OSError as exc:
            self.problems.append(f"cannot write the journal: {exc.strerror or exc}")

    def _tree_state(self) -> tuple[str | None, dict[str, str | None] | None]:
        if self._tree is None:
            self._tree = tree_state(self.config, self.root)
        return self._tree

    def _watch_sigterm(self) -> None:
        # Only where nobody else handles SIGTERM: a suite's own handler stays.
        _terminated.clear()
        try:
            if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                self._sigterm = signal.signal(signal.SIGTERM, _on_sigterm)
                _watching[:] = [os.getpid()]
        except ValueError:  # not the main thread
            pass

    def _unwatch_sigterm(self) -> None:
        if self._sigterm is not None:
            with contextlib.suppress(ValueError):
                signal.signal(signal.SIGTERM, self._sigterm)
            self._sigterm = None

    def pytest_keyboard_interrupt(self, excinfo) -> None:
        self._interrupted = self._interrupted or _interruption(excinfo.value)

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
        self._put(segment, [self.record.name_id(*name) for name in observed.names])
        self._problems[segment].extend(observed.problems)

    def _put(self, segment: int, ids: Iterable[int]) -> None:
        """Add names to a segment. Every name a segment gets goes through here: what is
        new is what the next journal entry writes."""
        names = self.record.segments[segment].names
        new = set(ids) - names
        if new:
            names |= new
            self._pending[segment].extend(sorted(new))

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
                imported = self.observer.imported_by(module)
                self._put(segment, [self.record.name_id(*n) for n in imported])

    def _add_kernels(self, segment: int, launches, problems: list[str]) -> None:
        ids = [self.record.name_id("kernel", launch.kernel) for launch in launches]
        if launches:
            ids.append(self.record.name_id("device", "cuda"))
        self._put(segment, ids)
        self._problems[segment].extend(problems)

    # --- tests and the fixtures they share --------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem):
        if _terminated:  # the handler's exception was swallowed (`except BaseException`)
            raise _Terminated("SIGTERM")
        observer = self.observer
        if observer is not None:
            if not self._outcomes:
                self._take(self._session)
            else:
                observer.close()  # the gap between two tests is no test's work
        own = self.record.add_segment("test", item.nodeid)
        self._outcomes.setdefault(item.nodeid, _Outcome())
        self._stack = [own]
        if self.kernels is not None:
            self.kernels.start()
        interrupted = ""
        try:
            return (yield)
        except BaseException as exc:  # pytest lets only Exit and KeyboardInterrupt through
            interrupted = _interruption(exc)
            raise
        finally:
            if self.kernels is not None:
                self._add_kernels(own, *self.kernels.stop())
            self._stack = []
            if observer is not None:
                self._take(own)
                lost = observer.check_ops()
                if lost:
                    self._problems[own].append(lost)
            self._finish(item, own, interrupted)

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

    def _finish(self, item: pytest.Item, own: int, interrupted: str = "") -> None:
        file = self._relative(Path(item.path))
        segments = [self._session, own]
        if file in self._files:
            segments.append(self._files[file])
        info = getattr(item, "_fixtureinfo", None)
        for definitions in getattr(info, "name2fixturedefs", {}).values():
            for definition in definitions:
                segments.extend(self._fixtures.get(id(definition), ()))
        problems = [p for s in segments for p in self._problems.get(s, ())]
        if self.unavailable:
            problems.append(self.unavailable)
        outcome = self._outcomes[item.nodeid]
        # Stopped before its end (docs/recording.md#honest-records): what it did not reach
        # is unknown, whatever pytest had reported for it so far.
        interrupted = interrupted or outcome.interrupted or ("SIGTERM" if _terminated else "")
        if interrupted:
            problems.append(f"{INTERRUPTED}{interrupted}")
        test = RecordedTest(
            nodeid=item.nodeid,
            file=file,
            outcome="error" if interrupted and outcome.outcome == "passed" else outcome.outcome,
            duration=round(outcome.duration, 4),
            segments=segments,
            unrecorded="; ".join(sorted(set(problems))),
        )
        self.record.tests.append(test)
        if self.journal is not None:
            try:
                self.journal.test(self.record, self._pending, test)
            except OSError as exc:
                self.problems.append(f"cannot write the journal: {exc.strerror or exc}")
                self.journal = None
            self._pending = defaultdict(list)

    def _relative(self, path: Path) -> str:
        try:
            return path.resolve().relative_to(self.root).as_posix()
        except ValueError:
            return path.as_posix()

    # --- xdist ------------------------------------------------------------------------

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        # Known here too: xdist may set up its nodes before our session start hook runs.
        self.is_controller = True
        node.workerinput[WORKER_INPUT] = str(self.journal_dir)
        commit, dirty = self._tree_state()
        node.workerinput[TREE_INPUT] = json.dumps({"commit": commit, "dirty": dirty})

    # --- the record -------------------------------------------------------------------

    def _meta(self) -> dict:
        torch = sys.modules.get("torch")
        meta = {
            "commit": self._tree_state()[0],
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
                "python": (
                    self.observer.python_how
                    if self.observer
                    else "C profile function (PyEval_SetProfile)"
                ),
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
        self._unwatch_sigterm()  # from here on a SIGTERM kills: the journals stay
        if self.is_controller:
            self._finalize(journal.journals_in(self.journal_dir))
        else:
            self._close()
            if not self.is_worker and self.journal is not None:
                self._finalize([self.journal.path])
        # A run asked to record that leaves no record must not pass for one that did.
        if self.problems and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR

    def _close(self) -> None:
        if self.observer is not None:
            self._take(self._session)  # what session teardown imported
            self.observer.stop()
        if self.kernels is not None:
            self.kernels.close()
        if self.journal is None:
            return
        if _terminated and not self._interrupted:
            self._interrupted = "SIGTERM"
        created = datetime.now(timezone.utc).isoformat(timespec="seconds")
        end = {"meta": {"created_at": created}, "interrupted": self._interrupted or None}
        try:
            self.journal.close(self.record, self._pending, end)
        except OSError as exc:
            self.problems.append(f"cannot write the journal: {exc.strerror or exc}")
            self.journal = None

    def _finalize(self, paths: list[Path]) -> None:
        """The journals become the record; they are removed once it is written."""
        try:
            self.record = journal.finalize(paths)
            storage.write(self.record, self.path)
        except TorchTalkError as exc:
            self.problems.append(f"{exc} (journals kept in {self.journal_dir})")
            return
        except OSError as exc:  # the directory cannot be made
            self.problems.append(
                f"cannot write the record {self.path}: {exc.strerror or exc} "
                f"(journals kept in {self.journal_dir})"
            )
            return
        for path in paths:
            path.unlink(missing_ok=True)
        self._remove_journal_dir()

    def _remove_journal_dir(self) -> None:
        with contextlib.suppress(OSError):
            self.journal_dir.rmdir()  # only when empty: another run's journals stay

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self._unwatch_sigterm()
        if not self.is_worker:
            self._remove_journal_dir()  # made when the path was checked, if no test ran

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
        if self.record.meta.get("partial"):
            why = "; ".join(self.record.meta.get("partial_reasons") or ())
            terminalreporter.write_line(f"the record is partial: {why}", yellow=True)


def _devices(torch) -> list[str]:
    """The device types this run could use: a CUDA test skipped here ran nothing here."""
    devices = ["cpu"]
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and cuda.is_available():
        devices.append("cuda")
    return devices


def _first_reason(tests: list[RecordedTest]) -> str:
    return next(t.unrecorded for t in tests if t.unrecorded)
