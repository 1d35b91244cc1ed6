"""Following a recorded test into the processes it starts (docs/recording.md#child-processes).

The recording process (the *root*: pytest, or an xdist worker) counts every process it
starts (an audit hook: ``subprocess.Popen``, ``os.fork``, ``os.system``,
``os.posix_spawn``...; and multiprocessing's spawn, which calls ``_posixsubprocess``
directly) and names, in an environment variable, a directory and the current *stretch*:
the work since the observer's last close, which the next close gives to a segment. A
Python child of the same environment loads a start-up hook (a ``.pth`` file put in
site-packages for the run, as coverage.py's ``patch = subprocess`` does), starts its own
observer once torch is imported, counts what *it* starts, and writes what it executed to
that directory before it exits (atexit, ``os._exit``, SIGTERM). A forked child keeps the
observer it was forked with and writes the same way.

When a stretch closes, the root reads the reports written for it and checks the process
tree: every process (the root, each child that reported) must have as many reporting
children as it started. One that did not report (a non-Python program, an interpreter
that does not load the hook, a child still running, one killed) makes the stretch's
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
from collections import Counter
from pathlib import Path

from indexer import durable

ENV = "TORCHTALK_RECORD_CHILDREN"  # JSON: {"dir", "root", "stretch", "package"}
NOT_FOLLOWED = "a child process was not followed"
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
    reads their reports and checks that every child it started was followed."""

    def __init__(self, root: Path, observer) -> None:
        self.root = root
        self.observer = observer
        self.stretch = 0
        self.dir = Path(tempfile.mkdtemp(prefix="torchtalk-children-"))
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
        """What the children of the closing stretch executed (names, problems, import
        work by module path), and a new stretch."""
        if not self._active:
            return set(), [], {}
        closing = self.stretch
        self.stretch += 1
        self._publish()
        started, unfollowable = self.spawns.take()
        folder = self.dir / str(closing)
        if not started and not unfollowable and not folder.is_dir():
            return set(), [], {}
        reports = read_reports(folder)
        shutil.rmtree(folder, ignore_errors=True)
        names: Names = set()
        imports: dict[str, Names] = {}
        problems: list[str] = []
        for report in reports.values():
            names |= report.names
            problems.extend(report.problems)
            for path, executed in report.imports.items():
                imports.setdefault(path, set()).update(executed)
        problems.extend(unfollowed(os.getpid(), started, unfollowable, reports, self.hook_problem))
        return names, problems, imports

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
        self.names: Names = set()
        self.problems: list[str] = []
        self.imports: dict[str, Names] = {}
        self.started: list[str] = []
        self.unfollowable: list[str] = []


def read_reports(folder: Path) -> dict[int, Report]:
    """pid -> what that process reported (the union of its reports)."""
    reports: dict[int, Report] = {}
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
        report = reports.setdefault(pid, Report())
        report.ppid = int(data.get("ppid", 0))
        report.names.update((str(k), str(n)) for k, n in data.get("names", ()))
        report.problems.extend(str(p) for p in data.get("problems", ()))
        for module, executed in dict(data.get("imports", {})).items():
            report.imports.setdefault(str(module), set()).update(
                (str(k), str(n)) for k, n in executed
            )
        # Each report carries everything its process started so far.
        report.started = [str(s) for s in data.get("started", ())]
        report.unfollowable = [str(s) for s in data.get("unfollowable", ())]
    return reports


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
    reporting = Counter(report.ppid for report in reports.values())
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
    """A child's side: writes what this process executed for the stretch that started it."""

    def __init__(self, directory: Path, stretch: int, observer=None) -> None:
        self.folder = Path(directory) / str(stretch)
        self.stretch = stretch
        self.observer = observer
        self.pid = os.getpid()
        self.ppid = os.getppid()
        self.sequence = 0
        self.names: Names = set()  # seen before the observer started (modules loaded)
        self.problems: list[str] = []
        self._lock = threading.RLock()

    def write(self) -> None:
        """Writes what ran since the previous write (atomically: a temporary name, then
        renamed); never raises into the child's own exit."""
        # Whatever fails, the child exits as it would have: without a report it is
        # counted as not followed.
        with self._lock, QUIET, contextlib.suppress(Exception):
            self._write()

    def _write(self) -> None:
        if os.getpid() != self.pid:
            return  # a fork of this process writes as its own reporter
        names, problems = set(self.names), list(self.problems)
        imports: dict[str, list] = {}
        if self.observer is not None:
            observed = self.observer.close()
            names |= observed.names
            problems.extend(observed.problems)
            for path, work in self.observer.take_imports().items():
                imports[path] = sorted(work.names)
                problems.extend(work.problems)
        spawns = Spawns.get()
        data = {
            "pid": self.pid, "ppid": self.ppid, "stretch": self.stretch,
            "names": sorted(names), "problems": problems, "imports": imports,
            "started": spawns.started, "unfollowable": spawns.unfollowable,
        }  # fmt: skip
        self.folder.mkdir(parents=True, exist_ok=True)
        name = f"{self.pid}-{self.sequence}.json"
        self.sequence += 1
        durable.write_atomic(self.folder / name, json.dumps(data).encode())


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
    _current = Reporter(directory, stretch, observer)
    spawns = Spawns.get()
    spawns.reset()
    spawns.on_exec = _write_current
    _install_exit_hooks()
    return _current


def _write_current() -> None:
    if _current is not None:
        _current.write()


def _forked_reporter() -> None:
    # A child's own fork reports as a child of it, for the same stretch.
    if _current is not None:
        become_child(_current.folder.parent, _current.stretch, _current.observer)


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
                QUIET.pending.append(lambda: on_sigterm(signum, frame))
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
