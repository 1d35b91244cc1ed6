"""Following a recorded test into the processes it starts (docs/recording.md#child-processes).

The recording process (the *root*: pytest, or an xdist worker) counts every process it
starts (an audit hook: ``subprocess.Popen``, ``os.fork``, ``os.system``,
``os.posix_spawn``...; and multiprocessing's spawn, which calls ``_posixsubprocess``
directly) and names, in an environment variable, a directory and the current *stretch*:
the work since the observer's last close, which the next close gives to a segment. A
Python child of the same environment loads a start-up hook (a ``.pth`` file put in
site-packages for the run, as coverage.py's ``patch = subprocess`` does), starts its own
observer once torch is imported, counts what *it* starts, and writes what it executed to
that directory: for each stretch the root asks it to report while it lives (its channel,
``child_channel``), and before it exits (atexit, ``os._exit``, SIGTERM). A forked child
keeps the observer it was forked with and reports the same way.

When a stretch closes, the root asks its live children for the stretch, reads the
reports and checks the process tree: every process (the root, each child that reported)
must have as many newly reporting children as it started, and every child still live
must have reported. One that did not (a non-Python program, an interpreter that does not
load the hook, a live child that did not answer in time, one killed) makes the stretch's
segment unrecorded, saying which program: never recorded as running only what the
parent did.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import sys
import sysconfig
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from indexer import durable
from indexer.record import child_channel

ENV = "TORCHTALK_RECORD_CHILDREN"  # JSON: {"dir", "root", "stretch", "package"}
NOT_FOLLOWED = "a child process was not followed"
STOOD_ASIDE = (
    "a profiler tracing Python (with_stack) ran: the recorder's profile function stood aside for it"
)
# What the start-up hook runs in every interpreter of the environment: nothing unless a
# recording named itself in the environment. One line: site runs a .pth line that
# starts with "import".
_PTH_LINE = (
    "import os, sys; exec('try:\\n import indexer.record.child_start as m\\n"
    'except ImportError:\\n sys.path.append(__import__("json").loads('
    'os.environ["{env}"])["package"])\\n import indexer.record.child_start as m\\n'
    "m.start()') if os.environ.get('{env}') else None\n"
)
# Helpers multiprocessing starts for itself, which run no code of the tree and live as long
# as their parent: not children a test's work waits for.
_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")

Names = set[tuple[str, str]]


def read_environment(value: str) -> dict:
    return json.loads(value)


class Spawns:
    """The processes this process starts, as short descriptions; one per process
    (an audit hook cannot be removed)."""

    _instance: Spawns | None = None

    def __init__(self) -> None:
        self.started: list[str] = []
        self.unfollowable: list[str] = []  # started in a way no report can answer
        self.on_exec = None  # called before the process replaces itself

    @classmethod
    def get(cls) -> Spawns:
        if cls._instance is None:
            spawns = cls._instance = Spawns()
            sys.addaudithook(spawns._audit)
            os.register_at_fork(after_in_child=spawns.reset)
            spawns._patch_multiprocessing()
        return cls._instance

    def take(self) -> tuple[list[str], list[str]]:
        started, self.started = self.started, []
        unfollowable, self.unfollowable = self.unfollowable, []
        return started, unfollowable

    def reset(self) -> None:
        self.started, self.unfollowable = [], []

    def _audit(self, event: str, args: tuple) -> None:
        # Called for every audited event in the process: the common ones leave at once.
        if event not in _EVENTS:
            return
        if event == "subprocess.Popen":
            argv = args[1] if args[1] else [args[0]]
            if not _system_tool(args[0] if args[0] else argv):
                self.started.append(_program(argv))
        elif event in ("os.fork", "os.forkpty"):
            self.started.append("fork")
        elif event == "os.posix_spawn":
            # subprocess spawns this way too, after its own event: counted once.
            caller = sys._getframe(1).f_code
            by_subprocess = caller.co_name == "_posix_spawn" and caller.co_filename.endswith(
                "subprocess.py"
            )
            if not by_subprocess and not _system_tool(args[0]):
                self.started.append(_program(args[1] or [args[0]]))
        elif event == "os.spawn":
            self.started.append(_program(args[2] or [args[1]]))
        elif event == "os.system":
            command = args[0].decode(errors="replace") if isinstance(args[0], bytes) else args[0]
            self.started.append(_program(str(command).split()[:1] or ["sh"]))
        elif event == "os.exec":
            self.unfollowable.append(f"{_program(args[1] or [args[0]])} (os.exec*)")
            if self.on_exec is not None:
                self.on_exec()

    def _patch_multiprocessing(self) -> None:
        # Spawn and forkserver start their processes through _posixsubprocess directly
        # (no audit event); a forkserver's children are forked by the server, not by us.
        import multiprocessing.forkserver
        import multiprocessing.util

        spawnv = multiprocessing.util.spawnv_passfds

        def spawnv_passfds(path, args, passfds):
            text = " ".join(str(a) for a in args)
            if not any(helper in text for helper in _HELPERS):
                self.started.append(f"{_program([path])} (multiprocessing)")
            return spawnv(path, args, passfds)

        multiprocessing.util.spawnv_passfds = spawnv_passfds
        connect = multiprocessing.forkserver.ForkServer.connect_to_new_process

        def connect_to_new_process(server, fds):
            self.unfollowable.append("a process forked by multiprocessing's forkserver")
            return connect(server, fds)

        multiprocessing.forkserver.ForkServer.connect_to_new_process = connect_to_new_process


_EVENTS = frozenset(
    ("subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn",
     "os.system", "os.exec")
)  # fmt: skip


# Programs of the system that run no code of a tree and start no other program (so no
# report is awaited from them): what tests ask the machine (platform.processor() runs
# `uname -p`), version control, compilers. Only under these names in the system's own
# directories (or found on PATH); a launcher (env, time, timeout, xargs) or a shell is
# never one.
SYSTEM_TOOLS = frozenset(
    ("uname", "git", "nvidia-smi", "rocm-smi", "rocminfo", "ldconfig", "lscpu", "nproc",
     "getconf", "hostname", "whoami", "id", "locale", "which", "free", "df", "ps",
     "lsb_release", "sysctl", "file", "true", "false", "cat", "ls", "ldd",
     "c++", "g++", "gcc", "cc", "clang", "clang++", "nvcc", "hipcc", "ld", "ar", "objdump",
     "nm", "readelf", "strip")
)  # fmt: skip
_SYSTEM_DIRS = ("/bin/", "/usr/bin/", "/sbin/", "/usr/sbin/", "/usr/local/bin/",
                "/usr/local/cuda/bin/", "/opt/rocm/bin/")  # fmt: skip


def _system_tool(program) -> bool:
    first = program[0] if isinstance(program, (list, tuple)) and program else program
    if isinstance(first, bytes):
        first = first.decode(errors="replace")
    if not isinstance(first, (str, os.PathLike)):
        return False
    text = os.fspath(first)
    name = os.path.basename(text)
    if name not in SYSTEM_TOOLS:
        return False
    if "/" not in text:
        return True
    return os.path.dirname(os.path.abspath(text)) + "/" in _SYSTEM_DIRS


def _program(argv) -> str:
    first = argv[0] if isinstance(argv, (list, tuple)) and argv else argv
    if isinstance(first, bytes):
        first = first.decode(errors="replace")
    return os.path.basename(str(first)) or str(first)


# --- the recording process ---------------------------------------------------------------


class Follower:
    """The root's side: names the current stretch to its children, and at each close
    asks the live ones to report it, reads their reports and checks that every child it
    started, and every child still running, was followed."""

    def __init__(self, root: Path, observer) -> None:
        self.root = root
        self.observer = observer
        self.stretch = 0
        self.dir = Path(tempfile.mkdtemp(prefix="torchtalk-children-"))
        self.reports = self.dir / REPORTS
        self.reports.mkdir()
        self.timeout = child_channel.report_timeout()
        # Children that reported and had not ended then: each close must hear from them
        # again (pid -> its program), and those that did not answer the last time.
        self.live: dict[int, str] = {}
        self.silent: set[int] = set()
        self._active = True
        self.hook_problem = ""  # why Python children cannot load the start-up hook
        self._pth = _install_startup_hook()
        if isinstance(self._pth, str):
            self.hook_problem, self._pth = self._pth, None
        self.spawns = Spawns.get()
        self.spawns.take()
        self._package_parent = str(Path(__file__).resolve().parents[2])
        self._publish()
        os.register_at_fork(after_in_child=self._forked)

    def _publish(self) -> None:
        # "package": what the hook appends to sys.path where indexer is not importable
        spec = {"dir": str(self.dir), "root": str(self.root), "stretch": self.stretch,
                "package": self._package_parent}  # fmt: skip
        os.environ[ENV] = json.dumps(spec, sort_keys=True)

    def close(self) -> tuple[Names, list[str], dict[str, Names]]:
        """What the children executed in the closing stretch (names, problems, import work
        by module path), and a new stretch. Live children are asked to report it
        (docs/recording.md#child-processes); a report that comes late (after its own
        stretch closed) is taken into the stretch that reads it: more, never less."""
        if not self._active:
            return set(), [], {}
        closing = self.stretch
        self.stretch += 1
        self._publish()
        started, unfollowable = self.spawns.take()
        requests = child_channel.Requests(self.dir, closing)
        try:
            asked = requests.send()
            if not (started or unfollowable or asked or self.live or _any_file(self.reports)):
                return set(), [], {}
            reports = self._gather(requests, started)
        finally:
            requests.close()
        names: Names = set()
        imports: dict[str, Names] = {}
        problems: list[str] = []
        for report in reports.values():
            names |= report.names
            problems.extend(report.problems)
            for path, executed in report.imports.items():
                imports.setdefault(path, set()).update(executed)
        problems.extend(unfollowed(os.getpid(), started, unfollowable, reports, self.hook_problem))
        problems.extend(self._not_heard(reports))
        for pid, report in reports.items():
            if report.final:
                self.live.pop(pid, None)
            else:
                self.live[pid] = report.program
        return names, problems, imports

    def _gather(self, requests: child_channel.Requests, started: list[str]) -> dict:
        """The reports of this close: waits (at most ``timeout``) for every live child
        asked to answer, and for children started in this stretch that have not reported
        yet while one of them may still do so."""
        start = time.monotonic()
        deadline = start + self.timeout
        # A child that did not answer the last close gets a short wait of its own now.
        grace = start + min(self.timeout, SILENT_GRACE_S)
        reports: dict[int, Report] = {}
        while True:
            requests.wait(grace)
            requests.wait(deadline, None if not self.silent else requests.asked - self.silent)
            read_reports(self.reports, into=reports)
            missing = self.live.keys() - reports.keys() - self.silent
            missing = {pid for pid in missing if _running(pid)}
            whole = not _lost(os.getpid(), started, reports)
            if (whole and not missing) or time.monotonic() >= deadline:
                return reports
            if not missing and not _unreported_children(reports):
                return reports  # what is missing ended, or was never a reporting Python
            time.sleep(0.01)
            requests.send()  # a child started late has its socket now

    def _not_heard(self, reports: dict[int, Report]) -> list[str]:
        """Live children that did not report this stretch: still running (the stretch's
        work may be theirs), or ended without their last report."""
        problems = []
        for pid, program in sorted(self.live.items()):
            if pid in reports:
                self.silent.discard(pid)
                continue
            if not _running(pid):
                problems.append(
                    f"{NOT_FOLLOWED}: {program} (pid {pid}), running since an earlier "
                    "stretch, ended without reporting"
                )
                del self.live[pid]
                self.silent.discard(pid)
                continue
            self.silent.add(pid)
            problems.append(
                f"{NOT_FOLLOWED}: {program} (pid {pid}), running since an earlier stretch, "
                f"did not report this stretch within {self.timeout:g} s"
            )
        return problems

    def _forked(self) -> None:
        # In a child forked from the root: it reports like any child, with the observer
        # it was forked with.
        if not self._active:
            return
        self._active = False
        become_child(self.dir, self.stretch, self.observer)

    def stop(self) -> None:
        if not self._active:
            return  # stopped already, or a fork of the recording process
        self._active = False
        os.environ.pop(ENV, None)
        if self._pth is not None:
            self._pth.unlink(missing_ok=True)
        shutil.rmtree(self.dir, ignore_errors=True)


SILENT_GRACE_S = 0.25  # how long a close waits for a child that did not answer the last one
REPORTS = "reports"  # the folder of the children's report files, in the recording's directory


def _any_file(folder: Path) -> bool:
    try:
        with os.scandir(folder) as entries:
            return any(not entry.name.startswith(".") for entry in entries)
    except OSError:
        return False


def _unreported_children(reports: dict[int, Report]) -> bool:
    """Whether the root or a reporting process has a child still running that has not
    reported (worth waiting for: it may be a Python child whose channel is not open yet);
    True where the system does not say (no /proc)."""
    reported = set(reports)
    for parent in (os.getpid(), *reports):
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            if parent == os.getpid():
                return True
            continue
        for task in tasks:
            try:
                text = Path(f"/proc/{parent}/task/{task}/children").read_text()
            except OSError:
                return True
            for pid in map(int, text.split()):
                if pid not in reported and _running(pid):
                    return True
    return False


def _running(pid: int) -> bool:
    """Alive and not a zombie (an ended child its parent has not waited for)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: alive is all the system says
        return _alive(pid)
    return stat[stat.rfind(")") + 2 : stat.rfind(")") + 3] not in ("Z", "X")


def _install_startup_hook() -> Path | str:
    """Puts the start-up hook in this environment's site-packages for the run (one file
    per recording process, removed at its end); else why it cannot."""
    site = Path(sysconfig.get_paths()["purelib"])
    remove_stale_hooks(site)
    target = site / f"{_HOOK_PREFIX}{os.getpid()}.pth"
    try:
        durable.write_atomic(target, _PTH_LINE.format(env=ENV).encode())
    except OSError as exc:
        return f"the start-up hook cannot be put in {site}: {exc.strerror or exc}"
    atexit.register(_remove_hook, target, os.getpid())
    return target


_HOOK_PREFIX = "torchtalk-record-children-"


def remove_stale_hooks(site: Path) -> list[Path]:
    """Removes the hooks that recordings killed before their end left in ``site`` (their
    process is gone); returns them. Inert without the variable, but not ours to leave."""
    removed = []
    for hook in site.glob(f"{_HOOK_PREFIX}*.pth"):
        pid = hook.name[len(_HOOK_PREFIX) : -len(".pth")]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        with contextlib.suppress(OSError):
            hook.unlink()
            removed.append(hook)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: alive
        return True
    return True


def _remove_hook(target: Path, owner: int) -> None:
    # atexit handlers run in a forked child that exits through sys.exit too.
    if os.getpid() == owner:
        target.unlink(missing_ok=True)


class Report:
    def __init__(self) -> None:
        self.ppid = 0
        self.first = False  # its process's first report is among these: started since
        self.final = False  # its process ended (or will run no more code of ours)
        self.program = "python"
        self.names: Names = set()
        self.problems: list[str] = []
        self.imports: dict[str, Names] = {}
        self.started: list[str] = []
        self.unfollowable: list[str] = []


def read_reports(folder: Path, into: dict[int, Report] | None = None) -> dict[int, Report]:
    """pid -> what that process reported (the union of its reports), read from ``folder``
    and removed there: each report is taken once."""
    reports: dict[int, Report] = {} if into is None else into
    try:
        files = sorted(p for p in folder.iterdir() if p.suffix == ".json")
    except OSError:
        return reports
    for path in files:
        try:
            data = json.loads(path.read_text())
            pid = int(data["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # unreadable: its process counts as not reporting
        finally:
            with contextlib.suppress(OSError):
                path.unlink()
        report = reports.setdefault(pid, Report())
        report.ppid = int(data.get("ppid", 0))
        report.first = report.first or bool(data.get("first", True))
        report.final = report.final or bool(data.get("final", True))
        report.program = str(data.get("program") or report.program)
        report.names.update((str(k), str(n)) for k, n in data.get("names", ()))
        report.problems.extend(str(p) for p in data.get("problems", ()))
        for module, executed in dict(data.get("imports", {})).items():
            report.imports.setdefault(str(module), set()).update(
                (str(k), str(n)) for k, n in executed
            )
        # Each report carries what its process started since its previous report.
        report.started.extend(str(s) for s in data.get("started", ()))
        report.unfollowable.extend(str(s) for s in data.get("unfollowable", ()))
    return reports


def _lost(root_pid: int, started: list[str], reports: dict[int, Report]) -> bool:
    """Whether a process of the tree started more children than reported back to it."""
    reporting = Counter(report.ppid for report in reports.values() if report.first)
    if len(started) > reporting[root_pid]:
        return True
    return any(len(r.started) > reporting[pid] for pid, r in reports.items())


def unfollowed(
    root_pid: int,
    started: list[str],
    unfollowable: list[str],
    reports: dict[int, Report],
    hook_problem: str = "",
) -> list[str]:
    """Why the stretch's process tree was not seen whole: a process that started more
    children than reported back to it (matched by parent pid), or started one no report
    can answer for."""
    tree = {root_pid: (started, unfollowable)}
    for pid, report in reports.items():
        tree[pid] = (report.started, report.unfollowable)
    # A process counts for its parent's starts in the close that reads its first report
    # (a live child reports again in later stretches, without being started again).
    reporting = Counter(report.ppid for report in reports.values() if report.first)
    problems = []
    for pid, (starts, cannot) in tree.items():
        for what in cannot:
            problems.append(f"{NOT_FOLLOWED}: {what}")
        lost = len(starts) - reporting[pid]
        if lost > 0:
            programs = ", ".join(sorted(set(starts)))
            why = hook_problem or (
                "not a Python of this environment, started without its environment, "
                "or still running when the work ended"
            )
            problems.append(
                f"{NOT_FOLLOWED}: {lost} of {len(starts)} started ({programs}) did not "
                f"report ({why})"
            )
    return problems


# --- a child -------------------------------------------------------------------------------


class Reporter:
    """A child's side: writes what this process executed, for each stretch a live child
    is asked to report (from its channel's thread) and when it ends."""

    def __init__(self, directory: Path, stretch: int, observer=None) -> None:
        self.dir = Path(directory)
        self.stretch = stretch  # the stretch its work goes to until the next request
        self.observer = observer
        self.pid = os.getpid()
        self.ppid = os.getppid()
        self.sequence = 0
        self.names: Names = set()  # seen before the observer started (modules loaded)
        self.problems: list[str] = []
        self.finished = False
        self.listener: child_channel.Listener | None = None
        self.disturbed = ""  # why this process's Python is no longer observed whole
        self.lock = threading.RLock()  # one report at a time, whichever thread writes it
        self._thread_observed = False  # the channel thread has the profile function

    def listen(self) -> None:
        """Opens the channel through which the root asks for each stretch's report."""
        self.listener = child_channel.Listener(self.dir, self.write)
        if not self.listener.start():
            self.listener = None

    def write(self, closing: int | None = None) -> None:
        """Writes what ran since the previous write: for the stretch ``closing`` (asked
        by the root), or the last report (None: the process ends). Atomically: a
        temporary name, then renamed; never raises into the child's own exit."""
        # Whatever fails, the child exits as it would have: without a report it is
        # counted as not followed.
        with self.lock, QUIET, contextlib.suppress(Exception):
            self._write(closing)

    def _write(self, closing: int | None) -> None:
        if os.getpid() != self.pid or self.finished:
            return  # a fork of this process writes as its own reporter
        final = closing is None
        stretch = self.stretch if final else closing
        names, problems = set(self.names), list(self.problems)  # problems hold for good
        self.names = set()
        imports: dict[str, list] = {}
        if self.observer is not None:
            in_channel = threading.current_thread() is not threading.main_thread()
            if not final and in_channel and not self._thread_observed:
                self._thread_observed = True
                _observe_this_thread(self.observer)
            if not final and getattr(self.observer, "_aside", False) and not self.disturbed:
                # A tracing profiler took every thread's profile function: the channel
                # thread's drain would see its own thread only.

                self.disturbed = f"a live child's Python is no longer observed: {STOOD_ASIDE}"
            observed = self.observer.close()
            names |= observed.names
            problems.extend(observed.problems)
            if observed.problems and not final and not self.disturbed:
                # Re-observed here, this thread only: the others stay unobserved.
                self.disturbed = (
                    "the Python observation of a live child was disturbed and its report "
                    f"thread cannot restore it: {observed.problems[0]}"
                )
            for path, work in self.observer.take_imports().items():
                imports[path] = sorted(work.names)
                problems.extend(work.problems)
        if self.disturbed:
            problems.append(self.disturbed)
        started, unfollowable = Spawns.get().take()
        data = {
            "pid": self.pid, "ppid": self.ppid, "stretch": stretch, "program": _this_program(),
            "first": self.sequence == 0, "final": final,
            "names": sorted(names), "problems": problems, "imports": imports,
            "started": started, "unfollowable": unfollowable,
        }  # fmt: skip
        folder = self.dir / REPORTS
        folder.mkdir(parents=True, exist_ok=True)
        name = f"{stretch}-{self.pid}-{self.sequence}.json"
        self.sequence += 1
        durable.write_atomic(folder / name, json.dumps(data).encode())
        if final:
            self.finished = True
            if self.listener is not None:
                self.listener.close()
        else:
            self.stretch = max(self.stretch, closing + 1)


def _this_program() -> str:
    """What this process runs, as a reason names it: ``python -m MODULE`` or its script."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None)
    if isinstance(name, str) and name:
        return f"python -m {name.removesuffix('.__main__')}"
    argv = getattr(sys, "argv", None) or ["python"]
    program = _program(argv)
    return f"python {program}" if program in ("-c", "-") else program or "python"


def _observe_this_thread(observer) -> None:
    # The channel's thread may have started before the observer did (a child observes
    # once torch is imported): without the profile function, its drain would read as a
    # test having replaced it. Once only: after that, a change is the drain's to see.
    if sys.getprofile() is None:
        observer._observe_new_thread(None, "call", None)


class Quiet:
    """A stretch of the observer's own work that a signal handler must not interrupt: the
    report it would write would miss what the interrupted drain had taken. What arrives
    meanwhile runs when the stretch ends."""

    def __init__(self) -> None:
        self.depth = 0
        self.pending: list = []

    def __enter__(self) -> None:
        self.depth += 1

    def __exit__(self, *exc) -> None:
        self.depth -= 1
        if self.depth == 0 and self.pending:
            pending, self.pending = self.pending, []
            for run in pending:
                run()


QUIET = Quiet()
_current: Reporter | None = None
_exit_hooks = False


def current() -> Reporter | None:
    return _current


def become_child(directory: Path, stretch: int, observer=None) -> Reporter:
    """Makes this process a reporting child (at start-up, or right after a fork)."""
    global _current
    inherited = _current
    _current = Reporter(directory, stretch, observer)
    if inherited is not None:
        _current.disturbed = inherited.disturbed
        if inherited.listener is not None:
            inherited.listener.close()  # the parent's socket: this process gets its own
    QUIET.depth, QUIET.pending = 0, []  # a fork of a drain in another thread: not ours
    spawns = Spawns.get()
    spawns.reset()
    spawns.on_exec = _write_current
    _install_exit_hooks()
    _watch_profile_changes()
    _current.listen()
    return _current


_profile_watched = False


def _watch_profile_changes() -> None:
    """A live child reports from its channel's thread, whose drain sees only that
    thread's profile function: a test that replaces another thread's is noticed here
    (the torch profiler's tracer is noticed by the observer itself)."""
    global _profile_watched
    if _profile_watched:
        return
    _profile_watched = True
    for module in (sys, threading):
        original = module.setprofile

        def setprofile(function, _original=original, _module=module.__name__):
            reporter = _current
            observer = getattr(reporter, "observer", None)
            ours = observer is not None and function == observer._observe_new_thread
            blinded = observer is not None and observer.by_profile_function and not ours
            if blinded and reporter.pid == os.getpid():
                reporter.disturbed = reporter.disturbed or (
                    f"a live child replaced its profile function ({_module}.setprofile)"
                )
            return _original(function)

        module.setprofile = setprofile


def _write_current() -> None:
    if _current is not None:
        _current.write()


def _forked_reporter() -> None:
    # A child's own fork reports as a child of it, for the same stretch.
    if _current is not None and _current.pid != os.getpid():
        become_child(_current.dir, _current.stretch, _current.observer)


def _after_quiet(handler, signum, frame) -> None:
    # The drain a signal waited for may have run in the channel's thread, where a
    # handler cannot end the process as it would have: the signal is sent again, to be
    # handled in the main thread.
    if threading.current_thread() is threading.main_thread():
        handler(signum, frame)
    else:
        os.kill(os.getpid(), signum)


def _install_exit_hooks() -> None:
    """Write the report however the process ends normally: at exit, in ``os._exit``
    (which skips atexit: multiprocessing's fork workers and DataLoader workers end with
    it), and on SIGTERM (``Pool.terminate`` ends its workers so), then end as before."""
    global _exit_hooks
    if _exit_hooks:
        return
    _exit_hooks = True
    atexit.register(_write_current)
    os.register_at_fork(after_in_child=_forked_reporter)
    original_exit = os._exit

    def _exit(status):
        _write_current()
        original_exit(status)

    os._exit = _exit
    try:
        previous = signal.getsignal(signal.SIGTERM)

        def on_sigterm(signum, frame):
            if QUIET.depth:
                QUIET.pending.append(lambda: _after_quiet(on_sigterm, signum, frame))
                return
            _write_current()
            if callable(previous):
                previous(signum, frame)
                return
            if previous == signal.SIG_IGN:
                return
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

        signal.signal(signal.SIGTERM, on_sigterm)
    except (ValueError, OSError, TypeError):
        pass  # not the main thread, or a handler set in C: a SIGTERM leaves no report
