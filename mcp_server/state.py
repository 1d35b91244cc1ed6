"""The index the server answers from, and the background build that produces it.

With a complete index on disk the server opens it lazily on the first request. Without
one it builds in two phases, in a background thread, so agents get answers early:

1. **quick**: Python and YAML files, plus the C++ files that register ops or bindings
   (a text search for the harness's registration macros). Written to a separate file
   (``index-quick.sqlite``) so no other consumer (the pytest plugin, ``torchtalk
   select``) ever mistakes it for a complete index. YAML, Python and tests are then
   ready; bindings are partial (the C++ functions they bind are not indexed yet).
2. **full**: the whole tree, written to the workspace's index and renamed into place;
   the server swaps to it and removes the quick file.

Every request takes the current :class:`Index` under a lock; a swap replaces the object,
and requests still holding the old one finish on its (still open) snapshot.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from indexer.errors import TorchTalkError
from indexer.gitinfo import head_commit as git_head
from indexer.query.freshness import Freshness, check_freshness
from indexer.query.index import Index
from indexer.workspace import Workspace
from mcp_server import heap

COMPONENTS = ("yaml", "bindings", "python", "tests", "cpp")
COMPONENT_TEXT = {
    "yaml": "op registry (native_functions.yaml, derivatives.yaml)",
    "bindings": "ops and Python bindings registered from C++",
    "python": "Python modules, classes, functions and their references",
    "tests": "tests and what they cover",
    "cpp": "C++/CUDA functions and the call graph",
}
QUICK_READY = ("yaml", "python", "tests")
QUICK_FILE = "index-quick.sqlite"
# The quick phase also indexes C++ files whose text names one of these (besides the
# harness's registration macros): CPython method tables and legacy operator registries.
EXTRA_REGISTRATION_WORDS = ("PyMethodDef", "RegisterOperators")
QUICK_WAIT_S = float(os.environ.get("TORCHTALK_MCP_QUICK_WAIT", "60"))
# The name list behind 'not found' answers and the edges in memory are loaded once the
# server has been idle this long: loading them holds the interpreter for 0.2-1 s on
# PyTorch (seconds when the index keeps no edges to read), and every request it overlapped
# would wait for it.
WARM_IDLE_S = 1.0
# How often, when idle, the served index is compared with the tree (a stat per indexed
# file and a git diff: 0.1-0.6 s on PyTorch), so that answers from a stale index say so.
FRESHNESS_EVERY_S = float(os.environ.get("TORCHTALK_MCP_FRESHNESS_EVERY", "30"))
# A pause this long starts one: the first check of a fresh clone hashes every file (~2 s
# on PyTorch), which a request arriving meanwhile would wait on; later ones only hash
# what was written since the previous one.
FRESHNESS_IDLE_S = float(os.environ.get("TORCHTALK_MCP_FRESHNESS_IDLE", "5"))

PENDING, BUILDING, PARTIAL, READY, FAILED = "pending", "building", "partial", "ready", "failed"


class NotReady(TorchTalkError):
    """The index a tool needs is not built yet (or its build failed)."""


class BuildCancelled(Exception):
    """Raised from the progress callback when the server shuts down mid-build."""


def quick_selector(workspace: Workspace) -> Callable[[Any], bool]:
    """Keep Python and YAML files, and C++ files that register ops or bindings."""
    manifest = workspace.manifest
    words = [
        *manifest.list("bindings", "torch_library_macros"),
        *manifest.list("bindings", "pybind_macros"),
        *manifest.list("bindings", "registration_wrappers"),
        *EXTRA_REGISTRATION_WORDS,
    ]
    needles = [word.encode() for word in dict.fromkeys(words) if word]
    root = workspace.source

    def select(entry: Any) -> bool:
        if entry.language not in ("cpp", "cuda"):
            return True
        try:
            data = (root / entry.path).read_bytes()
        except OSError:
            return True  # let the build record why it cannot be read
        return any(needle in data for needle in needles)

    return select


def _file_identity(path: Path) -> tuple[int, int, int]:
    try:
        stat = path.stat()
    except OSError:
        return (0, 0, 0)
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns)


def freshness_of(workspace: Workspace, path: Path, previous: Freshness | None = None) -> Freshness:
    """The index at ``path`` against the tree, on a connection of this thread's own."""
    try:
        index = Index(path)
    except TorchTalkError as exc:
        return Freshness(problem=f"the index cannot be read: {exc}")
    try:
        return check_freshness(workspace, index, previous=previous)
    except (OSError, sqlite3.Error) as exc:
        return Freshness(problem=f"it could not be compared with the tree: {exc}")
    finally:
        index.close()


def _warm(index: Index, full: bool) -> list[str]:
    """Load the name list 'not found' answers search (about a second on PyTorch), so the
    first unknown name an agent asks about is answered as fast as the rest; and for the
    full index, the edges in memory (``indexer.query.adjacency``: read from the index in
    ~0.1 s, or built once per index version in seconds), which ``trace``, ``tests`` and
    ``affected`` read instead of SQLite. A head start only: what fails here is said on
    stderr and returned (get_status says it), and requests do without it (and report
    their own problems)."""
    failed: list[str] = []

    def failure(what: str, exc: Exception, consequence: str = "") -> None:
        failed.append(f"{what} ({type(exc).__name__}: {exc})")
        print(f"torchtalk: loading {what} failed ({exc}){consequence}", file=sys.stderr)

    try:
        index._all_names_lower  # noqa: B018 - a cached property, computed for later
    except Exception as exc:  # any failure: the request path still works
        failure("the name list", exc)
    if not full:
        return failed
    from indexer.query import adjacency

    try:
        adjacency.shared(index.db_path, index.conn, index.meta)
    except Exception as exc:
        failure("the edges", exc, "; queries read SQLite")
    from indexer.query.warm import tables

    for name, load in tables():  # the lookup tables trace, search and modules read
        try:
            load(index)
        except Exception as exc:
            failure(name, exc)
    return failed


class ServerState:
    """The served index, per-component readiness, and the build history; thread-safe."""

    def __init__(
        self,
        workspace: Workspace,
        *,
        jobs: int | None = None,
        before_full_build: Callable[[], None] | None = None,
    ) -> None:
        self.workspace = workspace
        self.jobs = jobs
        self._before_full_build = before_full_build  # a test holds the full build here
        self._lock = threading.Lock()
        self._index: Index | None = None
        self._index_path: Path | None = None
        self._index_inode: int | None = None
        self._served: str = "none"  # none | quick | full
        self._components = dict.fromkeys(COMPONENTS, PENDING)
        self._warmed: Path | None = None  # the index whose tables _warm loaded
        self._warm_failed: list[str] = []  # what that load could not load
        self._progress: dict[str, Any] = {}
        self._phases: list[dict[str, Any]] = []
        self._error: str | None = None
        self._available = threading.Event()  # set once some index can be served
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None
        self._head_commit: str | None = None
        self._freshness: Freshness | None = None  # the last comparison with the tree
        self._freshness_at = 0.0  # monotonic time of that comparison
        self._first_check = threading.Lock()  # one check before the first answer
        self._active = 0  # requests being answered
        self._requests = 0  # requests begun
        self._last_request = time.monotonic()
        self.started = time.monotonic()

    # --- lifecycle ----------------------------------------------------------------------

    @property
    def full_path(self) -> Path:
        return self.workspace.db_path

    @property
    def quick_path(self) -> Path:
        return self.workspace.db_path.with_name(QUICK_FILE)

    def start(self) -> None:
        """Serve a complete index if there is one; otherwise start the phased build. An
        index that cannot be read is no index: it is rebuilt, as a selection runs
        everything without one (docs/reliability.md), and get_status says why."""
        # Off the first answer's path, in a child process (see git_head).
        threading.Thread(target=self._read_head, name="torchtalk-head", daemon=True).start()
        threading.Thread(
            target=self._watch_freshness, name="torchtalk-freshness", daemon=True
        ).start()
        if self.full_path.is_file():
            problem = self._unusable(self.full_path)
            if problem is None:
                self._serve(self.full_path, "full")
                return
            self._event("full", f"the index cannot be read ({problem}): rebuilding")
        self._thread = threading.Thread(target=self._build, name="torchtalk-build", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Cancel a running build (its partial file is removed) and wait a little for it."""
        self._cancel.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def wait_until_idle(self, timeout: float | None = None) -> bool:
        """For tests and benchmarks: wait for the background build to finish."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _read_head(self) -> None:
        head = git_head(self.workspace.source)
        with self._lock:
            self._head_commit = head

    def _serve(self, path: Path, served: str) -> None:
        with self._lock:
            self._index = None  # opened on first use, by whichever request comes first
            self._index_path = path
            self._index_inode = None
            self._served = served
            if served == "full":
                self._components = dict.fromkeys(COMPONENTS, READY)
            else:
                for name in QUICK_READY:
                    self._components[name] = READY
                self._components["bindings"] = PARTIAL
        self._available.set()

    def _event(self, build: str, step: str, done: int = 0, total: int = 0) -> None:
        with self._lock:
            now = round(time.monotonic() - self.started, 3)
            last = self._phases[-1] if self._phases else None
            if last is None or (last["build"], last["step"]) != (build, step):
                self._phases.append({"build": build, "step": step, "at_s": now})
            self._progress = {"build": build, "step": step, "done": done, "total": total}
        if self._cancel.is_set():
            raise BuildCancelled(f"{build} build cancelled")

    def _build(self) -> None:
        from indexer.build import build_index
        from indexer.refresh import Preparation, Refresh, prepare_for_selection

        try:
            if self.quick_path.is_file() and self._usable(self.quick_path):
                self._event("quick", "reused")
            else:
                self._set(("yaml", "python", "tests", "bindings"), BUILDING)
                build_index(
                    self.workspace,
                    jobs=self.jobs,
                    show_progress=False,
                    db_path=self.quick_path,
                    select=quick_selector(self.workspace),
                    on_progress=lambda step, done, total: self._event("quick", step, done, total),
                    extra_meta={"build_phase": "quick"},
                )
            self._serve(self.quick_path, "quick")
            self._set(("cpp",), BUILDING)
            if self._before_full_build is not None:
                self._event("full", "held")
                self._before_full_build()
            # `torchtalk index build` may have been quicker.
            if self._unusable(self.full_path) is not None:
                build_index(
                    self.workspace,
                    jobs=self.jobs,
                    show_progress=False,
                    on_progress=lambda step, done, total: self._event("full", step, done, total),
                    derive=Preparation(self.workspace),
                )
            self._serve(self.full_path, "full")
            self.quick_path.unlink(missing_ok=True)
            # What selections read, derived into the index as `torchtalk index build`
            # does (the tools themselves write nothing).
            prepare_for_selection(self.workspace, Refresh("built", "", None))
        except BuildCancelled:
            return
        except Exception as exc:  # the server keeps serving what it has, and says why
            message = (
                f"{type(exc).__name__}: {exc}" if not isinstance(exc, TorchTalkError) else str(exc)
            )
            traceback.print_exc(file=sys.stderr)
            with self._lock:
                self._error = message
                for name, value in self._components.items():
                    if value in (PENDING, BUILDING):
                        self._components[name] = FAILED
                self._phases.append(
                    {
                        "build": self._progress.get("build", "?"),
                        "step": "failed",
                        "at_s": round(time.monotonic() - self.started, 3),
                    }
                )
            self._available.set()

    def _usable(self, path: Path) -> bool:
        return self._unusable(path) is None

    @staticmethod
    def _unusable(path: Path) -> str | None:
        """Why the index at ``path`` cannot be served (missing, damaged), or None."""
        try:
            Index(path).close()
        except TorchTalkError as exc:
            return str(exc)
        return None

    def _set(self, names: Iterable[str], value: str) -> None:
        with self._lock:
            for name in names:
                self._components[name] = value

    # --- what requests use --------------------------------------------------------------

    def index(self, wait: float | None = None) -> Index:
        """The current index, waiting up to ``wait`` seconds for the quick phase."""
        if not self._available.wait(QUICK_WAIT_S if wait is None else wait):
            raise NotReady(
                f"the index of {self.workspace.source} is still being built "
                f"({self._progress_text()}); call get_status and retry shortly"
            )
        with self._lock:
            path = self._index_path
            if path is None:
                raise NotReady(f"no index could be built: {self._error}")
            try:
                inode = os.stat(path).st_ino
            except OSError:
                inode = None
            # `torchtalk index build` may have replaced the file since we opened it.
            if self._index is None or (inode is not None and inode != self._index_inode):
                if self._index is not None:
                    heap.release()  # the old index's caches may be frozen; now garbage
                self._index = Index(path)
                self._index_inode = inode
                threading.Thread(
                    target=self._warm_when_idle,
                    args=(self._index,),
                    name="torchtalk-warm",
                    daemon=True,
                ).start()
            return self._index

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """Around each request: background work waits until the server is idle."""
        with self._lock:
            self._active += 1
            self._requests += 1
        try:
            yield
        finally:
            with self._lock:
                self._active -= 1
                self._last_request = time.monotonic()

    def _warm_when_idle(self, index: Index) -> None:
        """Once idle, load what queries of ``index`` read (:func:`_warm`); then, whenever
        the server is idle again after requests, settle the heap (``mcp_server.heap``),
        until another index is served."""
        warmed = False
        settled_at = -1  # the request count at the last settle
        while not self._cancel.is_set():
            with self._lock:
                if self._index is not index:
                    return
                idle = 0.0 if self._active else time.monotonic() - self._last_request
                served = self._requests
            if idle < WARM_IDLE_S:
                self._cancel.wait(WARM_IDLE_S - idle)
                continue
            if not warmed:
                failed = _warm(index, full=index.db_path == self.full_path)
                warmed = True
                with self._lock:
                    self._warmed = index.db_path
                    self._warm_failed = failed
            if served != settled_at:
                heap.settle()
                settled_at = served
            self._cancel.wait(WARM_IDLE_S)

    def _watch_freshness(self) -> None:
        """Compare the full index served with the tree when idle, every
        FRESHNESS_EVERY_S: the tree moves under a long-lived server (a branch switched,
        an edit, an update made for another tree state)."""
        due = 0.0
        checked: tuple[Path, tuple[int, int, int]] | None = None  # index the last check read
        while not self._cancel.wait(min(WARM_IDLE_S, FRESHNESS_IDLE_S)):
            with self._lock:
                path = self._index_path if self._served == "full" else None
                idle = 0.0 if self._active else time.monotonic() - self._last_request
                previous = self._freshness
            if path is None or idle < FRESHNESS_IDLE_S or time.monotonic() < due:
                continue
            identity = _file_identity(path)
            if checked != (path, identity):
                previous = None  # another index: compare every file again
            found = freshness_of(self.workspace, path, previous)
            checked = (path, identity)
            with self._lock:
                self._freshness, self._freshness_at = found, time.monotonic()
            due = time.monotonic() + FRESHNESS_EVERY_S

    def check_before_answering(self) -> None:
        """Compare the full index served with the tree once, before the first answer: an
        agent's fresh server must not answer from an index the tree has moved past until
        the idle watcher's first check (a stat per indexed file, as ``select`` does)."""
        with self._lock:
            path = self._index_path if self._served == "full" else None
            done = self._freshness is not None
        if path is None or done:
            return
        with self._first_check:
            with self._lock:
                if self._freshness is not None:
                    return
            found = freshness_of(self.workspace, path)
            with self._lock:
                if self._freshness is None:
                    self._freshness, self._freshness_at = found, time.monotonic()

    def stale_note(self) -> str | None:
        """One line when the last comparison found the index out of date, else None."""
        with self._lock:
            found, at = self._freshness, self._freshness_at
        if found is None or found.fresh:
            return None
        return (
            f"the index may not match the tree ({found.describe()}, checked "
            f"{time.monotonic() - at:.0f}s ago): names and lines there may have moved; "
            "run 'torchtalk index update'"
        )

    def readiness(self) -> dict[str, str]:
        with self._lock:
            return dict(self._components)

    def missing(self, needs: Iterable[str]) -> list[str]:
        """The components among ``needs`` that are not ready yet."""
        with self._lock:
            return [name for name in needs if self._components.get(name) != READY]

    def incomplete_note(self, needs: Iterable[str]) -> str | None:
        """One line saying which needed components are unfinished, or None."""
        missing = self.missing(needs)
        if not missing:
            return None
        with self._lock:
            states = ", ".join(f"{name} {self._components[name]}" for name in missing)
            error = self._error
        if error:
            return f"incomplete: {states} (build failed: {error})"
        return (
            f"incomplete: {states} ({self._progress_text()}); this answer may miss "
            "what those components add; call get_status and ask again when ready"
        )

    def _progress_text(self) -> str:
        progress = self._progress
        if not progress:
            return "starting"
        text = f"{progress['build']} build: {progress['step']}"
        if progress["step"] == "extract" and progress.get("total"):
            text += f" {progress['done']}/{progress['total']} files"
        return text

    def snapshot(self) -> dict[str, Any]:
        """Everything get_status reports about the server and its build."""
        with self._lock:
            warm_done = self._index_path is not None and self._warmed == self._index_path
            return {
                "source": str(self.workspace.source),
                "harness": self.workspace.harness,
                "serving": self._served,
                "db_path": str(self._index_path) if self._index_path else None,
                "components": dict(self._components),
                "progress": dict(self._progress),
                "progress_text": self._progress_text() if self._progress else "",
                "phases": [dict(phase) for phase in self._phases],
                "error": self._error,
                "uptime_s": round(time.monotonic() - self.started, 3),
                "building": self._thread is not None and self._thread.is_alive(),
                "head_commit": self._head_commit,
                # the index served has its lookup tables loaded (_warm): answers from here
                # on pay none of that; a load that failed is no warm index: what failed
                "warmed": warm_done and not self._warm_failed,
                "warm_failed": list(self._warm_failed) if warm_done else [],
            }
