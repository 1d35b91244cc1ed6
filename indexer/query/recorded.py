"""Queries over a recorded run: which tests executed what, and what a test executed.

The record (``indexer.record``) is data of the index; everything that reads one (the
selection, ``torchtalk record``, ``status``, the MCP tools) asks it through this class.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from indexer.record import storage
from indexer.record.model import KINDS, Record, RecordedTest
from indexer.wording import age

RECORD_FILE = "record.ttr"  # beside the index
_cache_lock = threading.Lock()
_cache: dict[str, tuple[tuple[int, int], RecordedRuns]] = {}  # path -> (mtime, size), runs


def record_path_for(db_path: Path) -> Path:
    """Where the record of the index at ``db_path`` lives by default."""
    return db_path.parent / RECORD_FILE


class RecordedRuns:
    """A record, opened once, with its inverted lookups built on first use."""

    def __init__(self, record: Record, path: Path | None = None) -> None:
        self.record = record
        self.path = path
        self._tests_of_segment: dict[int, list[int]] | None = None
        self._by_name: dict[tuple[str, str], int] | None = None
        self._naming: dict[str, list[int]] | None = None  # module path -> segments naming it
        self._functions: dict[str, list[tuple[str, str]]] | None = None  # module -> its functions
        self._executed_by: dict[int, list[int]] | None = None  # name -> segments, made here
        self._overloads: dict[str, list[str]] | None = None
        self._lock = threading.RLock()  # the lookups build on one another

    @classmethod
    def open(cls, path: Path) -> RecordedRuns:
        """RecordError (one line, with the reason) when the record cannot be used."""
        return cls(storage.read(path), path)

    @classmethod
    def cached(cls, path: Path) -> RecordedRuns:
        """Like :meth:`open`, reusing the last opening while the file is unchanged (a
        server asks on every call; a record is read whole)."""
        stat = path.stat()
        stamp = (stat.st_mtime_ns, stat.st_size)
        with _cache_lock:
            known = _cache.get(str(path))
            if known is not None and known[0] == stamp:
                return known[1]
        runs = cls.open(path)
        with _cache_lock:
            _cache[str(path)] = (stamp, runs)
        return runs

    # --- lookups ----------------------------------------------------------------------

    def _index(self) -> tuple[dict[int, list[int]], dict[tuple[str, str], int]]:
        with self._lock:
            if self._tests_of_segment is None or self._by_name is None:
                tests_of: dict[int, list[int]] = defaultdict(list)
                for index, test in enumerate(self.record.tests):
                    for segment in test.segments:
                        tests_of[segment].append(index)
                self._tests_of_segment = dict(tests_of)
                self._by_name = {name: i for i, name in enumerate(self.record.names)}
            return self._tests_of_segment, self._by_name

    def name_ids(self, names: Iterable[tuple[str, str]]) -> list[int]:
        _, by_name = self._index()
        return [by_name[name] for name in names if name in by_name]

    def segments_executing(self, name: int) -> Sequence[int]:
        """The segments that executed the name with id ``name``: the record's postings
        when it was read from disk (nothing else is read), else made once from it."""
        if self.record.postings is not None:
            return self.record.postings(name)
        with self._lock:
            if self._executed_by is None:
                executed_by: dict[int, list[int]] = defaultdict(list)
                for index, segment in enumerate(self.record.segments):
                    for each in segment.names:
                        executed_by[each].append(index)
                self._executed_by = dict(executed_by)
            return self._executed_by.get(name, ())

    def tests_executing(self, names: Iterable[tuple[str, str]]) -> dict[int, set[int]]:
        """Test index -> the ids of ``names`` it executed through its own segments (setup,
        call, teardown, fixtures, its file's collection, the session): import work is
        no test's own (``import_work``, ``importers``)."""
        tests_of, _ = self._index()
        found: dict[int, set[int]] = defaultdict(set)
        for name in set(self.name_ids(names)):
            for segment in self.segments_executing(name):
                for test in tests_of.get(segment, ()):
                    found[test].add(name)
        return found

    def tests_using_device(self, device: str) -> set[int] | None:
        """The tests that used ``device`` (``cuda``): allocated its memory or launched its
        kernels, in their own segments. None when the record cannot tell who did not:
        devices per test were not recorded (format 1, or off), or some part of the record
        was made where ``device`` was absent (its tests used none there, not everywhere)."""
        meta = self.record.meta
        how = str((meta.get("mechanisms") or {}).get("devices", ""))
        everywhere = meta.get("devices_in_every_part", meta.get("devices", []))
        # A merge says each part's way, "; "-joined: every part must have counted.
        counted = all(way.startswith("allocations") for way in how.split("; "))
        if not counted or device not in everywhere:
            return None
        return set(self.tests_executing([("device", device)]))

    def import_work(self, names: Iterable[tuple[str, str]]) -> dict[str, set[int]]:
        """Module path -> the ids of ``names`` its body ran while it was imported."""
        segments = self.record.segments
        found: dict[str, set[int]] = defaultdict(set)
        for name in set(self.name_ids(names)):
            for segment in self.segments_executing(name):
                if segments[segment].kind == "module":
                    found[segments[segment].label].add(name)
        return dict(found)

    def importers(self, modules: Iterable[str]) -> set[int]:
        """The tests whose process imports one of ``modules`` (paths): a test file, fixture
        or test that imported it, or imported a module whose import imported it, and so
        on. Read from what each module body imported and from the modules its namespace
        names, so it does not depend on which test happened to import a module first."""
        tests_of, _ = self._index()
        naming = self._module_naming()
        segments = self.record.segments
        seen = set(modules)
        frontier = list(seen)
        tests: set[int] = set()
        while frontier:
            module = frontier.pop()
            for segment in naming.get(module, ()):
                if segments[segment].kind != "module":
                    tests.update(tests_of.get(segment, ()))
                elif segments[segment].label not in seen:
                    seen.add(segments[segment].label)
                    frontier.append(segments[segment].label)
        return tests

    def functions_of(self, module: str) -> list[tuple[str, str]]:
        """The recorded function names defined in ``module`` (a path)."""
        with self._lock:
            if self._functions is None:
                functions: dict[str, list[tuple[str, str]]] = defaultdict(list)
                for kind, text in self.record.names:
                    if kind == "function":
                        functions[text.rsplit(":", 1)[0]].append((kind, text))
                self._functions = dict(functions)
            return self._functions.get(module, [])

    def _module_naming(self) -> dict[str, list[int]]:
        """Module path -> the segments that imported it (its name is a module name)."""
        with self._lock:
            if self._naming is None:
                self._naming = {
                    text: list(self.segments_executing(i))
                    for i, (kind, text) in enumerate(self.record.names)
                    if kind == "module"
                }
            return self._naming

    def matching_names(self, kind: str, pattern: str) -> list[tuple[str, str]]:
        """Names of ``kind`` equal to ``pattern``, else those containing it (functions by
        qualname suffix). An op named without its overload matches every overload the
        record holds, the bare name among them; one named with its overload, itself."""
        if kind == "op":  # asked for every op a change reaches: looked up, not scanned
            if "." in pattern:
                base = pattern.split(".", 1)[0]
                return [("op", pattern)] if pattern in self._op_overloads().get(base, ()) else []
            return self.op_names(pattern)
        exact = [(k, t) for k, t in self.record.names if k == kind and t == pattern]
        if exact:
            return exact
        return [
            (k, t) for k, t in self.record.names
            if k == kind and (t.endswith(":" + pattern) or t.endswith("." + pattern))
        ]  # fmt: skip

    def binding_names(self, qualname: str) -> list[tuple[str, str]]:
        """The recorded bindings that are the indexed binding ``qualname``: one name is
        the other's dotted suffix ('recext._C.fn' recorded, '_C.fn' or the whole indexed)."""
        return [
            (kind, text) for kind, text in self.record.names
            if kind == "binding"
            and (text == qualname or text.endswith("." + qualname) or qualname.endswith("." + text))
        ]  # fmt: skip

    def autograd_node_names(self, function: str) -> list[tuple[str, str]]:
        """The recorded autograd nodes of C++ autograd function ``function`` (``ns::F``):
        ``torch::autograd::CppNode<ns::F>``, F as the compiler demangles it, matched by its
        last component (the index may qualify it differently)."""
        last = function.rsplit("::", 1)[-1]
        found = []
        for kind, text in self.record.names:
            if kind != "backward" or "CppNode<" not in text or not text.endswith(">"):
                continue
            argument = text[text.index("CppNode<") + len("CppNode<") : -1]
            if argument.rsplit("::", 1)[-1] == last:
                found.append((kind, text))
        return found

    def op_names(self, base: str) -> list[tuple[str, str]]:
        """The recorded op names of ``base`` (``aten::sort``) in any overload spelling:
        ``aten::sort``, ``aten::sort.stable``, ... (``indexer.select.op_family``)."""
        return [("op", text) for text in self._op_overloads().get(base, ())]

    def _op_overloads(self) -> dict[str, list[str]]:
        """Op name without its overload -> the recorded names of it (``aten::add`` ->
        ``aten::add``, ``aten::add.Tensor``, ...), in the record's order."""
        with self._lock:
            if self._overloads is None:
                overloads: dict[str, list[str]] = defaultdict(list)
                for kind, text in self.record.names:
                    if kind == "op":
                        overloads[text.split(".", 1)[0]].append(text)
                self._overloads = dict(overloads)
            return self._overloads

    def test(self, nodeid: str) -> RecordedTest | None:
        return next((t for t in self.record.tests if t.nodeid == nodeid), None)

    def names_of(self, test: RecordedTest) -> dict[str, list[str]]:
        """Kind -> sorted texts the test executed."""
        by_kind: dict[str, list[str]] = {kind: [] for kind in KINDS}
        for name in self.record.names_of(test):
            kind, text = self.record.names[name]
            by_kind[kind].append(text)
        return {kind: sorted(texts) for kind, texts in by_kind.items() if texts}

    # --- summaries --------------------------------------------------------------------

    def age_seconds(self) -> int | None:
        created = self.record.meta.get("created_at")
        try:
            when = datetime.fromisoformat(str(created))
        except ValueError:
            return None
        return int((datetime.now(timezone.utc) - when).total_seconds())

    def summary(self) -> dict[str, Any]:
        record = self.record
        tests = record.tests
        outcomes = Counter(t.outcome for t in tests)
        kinds = Counter(kind for kind, _ in record.names)
        return {
            "path": str(self.path) if self.path else None,
            "commit": record.meta.get("commit"),
            "created_at": record.meta.get("created_at"),
            "age_seconds": self.age_seconds(),
            "tests": len(tests),
            "test_files": len({t.file for t in tests}),
            "complete_tests": sum(1 for t in tests if t.complete),
            "unrecorded_tests": sum(1 for t in tests if t.unrecorded),
            "outcomes": dict(sorted(outcomes.items())),
            "names": dict(sorted(kinds.items())),
            "ops": kinds.get("op", 0),
            "torch": record.meta.get("torch"),
            "devices": record.meta.get("devices", []),
            # Tests that used each device type (allocated on it, launched its kernels).
            "tests_by_device": {
                text: len(self.tests_executing([(kind, text)]))
                for kind, text in record.names
                if kind == "device"
            },
            "device_types": (record.meta.get("mechanisms") or {}).get(
                "devices", "unknown: the record does not say (made before format 2)"
            ),
            # How CUDA kernels were captured, or why not ('off: no CUDA device').
            "cuda_kernels": (record.meta.get("mechanisms") or {}).get(
                "cuda_kernels", "unknown: the record does not say"
            ),
            "problems": record.meta.get("problems", []),
            "bytes": storage.size_on_disk(self.path) if self.path else None,
        }

    def per_test_counts(self, kind: str) -> list[int]:
        """How many names of ``kind`` each test executed (for stats)."""
        counts = []
        for test in self.record.tests:
            names = self.record.names_of(test)
            counts.append(sum(1 for n in names if self.record.names[n][0] == kind))
        return counts

    def files_executing(self, names: Iterable[tuple[str, str]]) -> set[str]:
        return {self.record.tests[t].file for t in self.tests_executing(names)}


def record_status(db_path: Path) -> dict[str, Any] | None:
    """The record beside the index at ``db_path``, for status answers: its summary, or
    {"path", "error"} when it cannot be used, or None when there is none."""
    path = record_path_for(db_path)
    try:
        return RecordedRuns.cached(path).summary()
    except FileNotFoundError:
        return None
    except (storage.RecordError, OSError) as exc:
        return {"path": str(path), "error": str(exc)}


def record_line(record: dict[str, Any] | None) -> str:
    """One line on the record for `torchtalk status` and MCP `get_status`."""
    if record is None:
        return "record:   none (pytest --torchtalk-record makes one beside the index)"
    if "error" in record:
        return f"record:   unusable: {record['error']}"
    ago = age(record["age_seconds"])
    return (
        f"record:   {record['tests']} tests in {record['test_files']} files, "
        f"{record['ops']} ops, commit {(record['commit'] or '-')[:12]}, "
        f"made {record['created_at']} ({ago} ago)"
    )
