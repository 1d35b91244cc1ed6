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
from indexer.record.model import COMPLETE_OUTCOMES, KINDS, Record, RecordedTest
from indexer.wording import age

RECORD_FILE = "record.ttr"  # beside the index
_cache_lock = threading.Lock()
_cache: dict[str, tuple[tuple[int, int], RecordedRuns]] = {}  # path -> (mtime, size), runs


def record_path_for(db_path: Path) -> Path:
    """Where the record of the index at ``db_path`` lives by default."""
    return db_path.parent / RECORD_FILE


class _InMemory:
    """The lookups of :class:`storage.StoredRecord`, made from a record in memory (one
    merged or recorded here, or of an older format)."""

    def __init__(self, record: Record) -> None:
        self.record = record
        executed_by: dict[int, list[int]] = defaultdict(list)
        for index, segment in enumerate(record.segments):
            for name in segment.names:
                executed_by[name].append(index)
        self._executed_by = dict(executed_by)
        tests_of: dict[int, list[int]] = defaultdict(list)
        groups: dict[tuple[str, str, str], list[int]] = defaultdict(list)
        by_file: dict[str, list[int]] = defaultdict(list)
        for index, test in enumerate(record.tests):
            for segment in test.segments:
                tests_of[segment].append(index)
            groups[(test.file, test.outcome, test.unrecorded)].append(index)
            by_file[test.file].append(index)
        self._tests_of = dict(tests_of)
        self._groups: dict[tuple[str, str, str], Sequence[int]] = dict(groups)
        self._by_file = dict(by_file)

    def segments_executing(self, name: int) -> Sequence[int]:
        return self._executed_by.get(name, ())

    # In memory each segment is a work set of its own.
    worksets_executing = segments_executing

    def segments_of_workset(self, workset: int) -> Sequence[int]:
        return (workset,)

    def tests_of_segment(self, segment: int) -> Sequence[int]:
        return self._tests_of.get(segment, ())

    def tests_of_segments(self, segments: Sequence[int]) -> tuple[list[int], list[int]]:
        found: list[int] = []
        counts = []
        for segment in segments:
            tests = self._tests_of.get(segment, ())
            found += tests
            counts.append(len(tests))
        return found, counts

    def segment_kind(self, segment: int) -> str:
        return self.record.segments[segment].kind

    def segment_kinds(self, segments: Sequence[int]) -> list[str]:
        return [self.record.segments[segment].kind for segment in segments]

    def segment_label(self, segment: int) -> str:
        return self.record.segments[segment].label

    def test_groups(self) -> dict[tuple[str, str, str], Sequence[int]]:
        return self._groups

    def tests_of_file(self, file: str) -> Sequence[int]:
        return self._by_file.get(file, [])


class RecordedRuns:
    """A record, opened once, with its inverted lookups built on first use.

    A record opened from disk (:meth:`open`) is read by parts as it is asked
    (``storage.StoredRecord``): a question about a few names reads their postings and the
    tests' small columns, not every test. ``record`` has the attributes of a
    :class:`Record` (``meta``, ``names``, ``files``, ``tests``); a value found damaged
    where it is read raises ``storage.RecordError``."""

    def __init__(self, record: Record | storage.StoredRecord, path: Path | None = None) -> None:
        self.record = record
        self.path = path
        self._view: storage.StoredRecord | _InMemory | None = (
            record if isinstance(record, storage.StoredRecord) else None
        )
        self._by_name: dict[tuple[str, str], int] | None = None
        self._naming: dict[str, list[int]] = {}  # module path -> segments naming it
        self._functions: dict[str, list[tuple[str, str]]] | None = None  # module -> its functions
        self._overloads: dict[str, list[str]] | None = None
        self._names_of_worksets: list[frozenset[int]] | None = None
        self._last_hit: tuple[frozenset[int], list[tuple[int, set[int]]]] | None = None
        self._lock = threading.RLock()  # the lookups build on one another

    @classmethod
    def open(cls, path: Path) -> RecordedRuns:
        """RecordError (one line, with the reason) when the record cannot be used."""
        return cls(storage.open_stored(path), path)

    @classmethod
    def cached(cls, path: Path) -> RecordedRuns:
        """Like :meth:`open`, reusing the last opening while the file is unchanged (a
        server asks on every call)."""
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

    def _lookups(self) -> storage.StoredRecord | _InMemory:
        with self._lock:
            if self._view is None:
                self._view = _InMemory(self.record)  # type: ignore[arg-type]
            return self._view

    def _names_index(self) -> dict[tuple[str, str], int]:
        with self._lock:
            if self._by_name is None:
                self._by_name = {name: i for i, name in enumerate(self.record.names)}
            return self._by_name

    def name_ids(self, names: Iterable[tuple[str, str]]) -> list[int]:
        by_name = self._names_index()
        return [by_name[name] for name in names if name in by_name]

    def segments_executing(self, name: int) -> Sequence[int]:
        """The segments that executed the name with id ``name``."""
        return self._lookups().segments_executing(name)

    def tests_executing(self, names: Iterable[tuple[str, str]]) -> dict[int, set[int]]:
        """Test index -> the ids of ``names`` it executed through its own segments (setup,
        call, teardown, fixtures, its file's collection, the session): import work is
        no test's own (``import_work``, ``importers``). The sets are shared between the
        tests that executed the same of ``names``: read them, do not change them."""
        hits = self._segments_hit(names)
        tests, counts = self._lookups().tests_of_segments([segment for segment, _ in hits])
        if len(tests) == len(hits):  # each segment one test's: its own, the common case
            each = [hit for _, hit in hits]
        else:
            each = [hit for (_, hit), count in zip(hits, counts, strict=True) for _ in range(count)]
        found = dict(zip(tests, each, strict=True))
        if len(found) == len(tests):
            return found  # no test reached by two segments: nothing to join
        # A test reached by several segments executed what each of them did: the sets
        # are joined once per pair met (a session's segment holds every test).
        found = {}
        joined: dict[tuple[int, int], set[int]] = {}
        for test, hit in zip(tests, each, strict=True):
            known = found.get(test)
            if known is None:
                found[test] = hit
            elif known is not hit:
                pair = (id(known), id(hit))  # both kept alive by `each` and `joined`
                union = joined.get(pair)
                if union is None:
                    union = joined[pair] = known | hit
                found[test] = union
        return found

    def _segments_hit(self, names: Iterable[tuple[str, str]]) -> list[tuple[int, set[int]]]:
        """(segment, the ids of ``names`` it executed): each work set followed to its
        segments once, however many of the names it executed. The last answer is kept:
        a selection asks for the same names' tests and then their import work."""
        ids = frozenset(self.name_ids(names))
        with self._lock:
            if self._last_hit is not None and self._last_hit[0] == ids:
                return self._last_hit[1]
        view = self._lookups()
        by_workset: dict[int, set[int]] = defaultdict(set)
        for name in ids:
            for workset in view.worksets_executing(name):
                by_workset[workset].add(name)
        found = [
            (segment, hit)
            for workset, hit in by_workset.items()
            for segment in view.segments_of_workset(workset)
        ]
        with self._lock:
            self._last_hit = (ids, found)
        return found

    def test_groups(self) -> dict[tuple[str, str, str], Sequence[int]]:
        """(test file, outcome, why unrecorded ('' when recorded whole)) -> the indexes of
        the tests that share them: what deciding which tests to trust reads, without
        making each test's object."""
        return self._lookups().test_groups()

    def tests_of_file(self, file: str) -> Sequence[int]:
        """The indexes of the recorded tests of ``file`` (a repo path)."""
        return self._lookups().tests_of_file(file)

    def nodeid(self, test: int) -> str:
        """The node id of the test at index ``test``, without its object."""
        if isinstance(self.record, storage.StoredRecord):
            return self.record.nodeid(test)
        return self.record.tests[test].nodeid

    def file_of(self, test: int) -> str:
        """The test file of the test at index ``test``, without its object."""
        if isinstance(self.record, storage.StoredRecord):
            return self.record.file_of(test)
        return self.record.tests[test].file

    def nodeids_of_file(self, file: str) -> list[tuple[int, str]]:
        """(index, node id) of each recorded test of ``file``, without the tests' objects."""
        tests = self.tests_of_file(file)
        if isinstance(self.record, storage.StoredRecord):
            return list(zip(tests, self.record.nodeids_in(file), strict=True))
        return [(i, self.record.tests[i].nodeid) for i in tests]

    def parts_of_file(self, file: str) -> list[str]:
        """What follows ``FILE::`` in each node id of the tests of ``file`` ('' for one
        that names no part), in the order of :meth:`tests_of_file`."""
        if isinstance(self.record, storage.StoredRecord):
            parts = self.record.parts_in(file)
            if parts is not None:
                return parts
        return [
            nodeid.split("::", 1)[1] if "::" in nodeid else ""
            for _, nodeid in self.nodeids_of_file(file)
        ]

    def parts_of_tests(self, file: str, tests: Sequence[int]) -> list[str] | None:
        """:meth:`parts_of_file` for some of the tests of ``file`` (ascending indexes), in
        their order, cut from their own node ids; None where the record is not read by
        parts (then :meth:`parts_of_file` answers)."""
        if isinstance(self.record, storage.StoredRecord):
            return self.record.parts_of_tests(file, tests)
        return None

    def test_files(self) -> set[str]:
        """The test files the record holds tests of."""
        return {file for file, _, _ in self.test_groups()}

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
        view = self._lookups()
        found: dict[str, set[int]] = defaultdict(set)
        hits = self._segments_hit(names)
        kinds = view.segment_kinds([segment for segment, _ in hits])
        for (segment, hit), kind in zip(hits, kinds, strict=True):
            if kind == "module":
                found[view.segment_label(segment)] |= hit
        return dict(found)

    def importers(self, modules: Iterable[str]) -> set[int]:
        """The tests whose process imports one of ``modules`` (paths): a test file, fixture
        or test that imported it, or imported a module whose import imported it, and so
        on. Read from what each module body imported and from the modules its namespace
        names, so it does not depend on which test happened to import a module first."""
        view = self._lookups()
        seen = set(modules)
        frontier = list(seen)
        tests: set[int] = set()
        while frontier:
            module = frontier.pop()
            for segment in self._module_naming(module):
                if view.segment_kind(segment) != "module":
                    tests.update(view.tests_of_segment(segment))
                elif (label := view.segment_label(segment)) not in seen:
                    seen.add(label)
                    frontier.append(label)
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

    def _module_naming(self, module: str) -> list[int]:
        """The segments that imported ``module`` (a path: its name is a module name)."""
        with self._lock:
            if module not in self._naming:
                ids = self.name_ids([("module", module)])
                self._naming[module] = list(self.segments_executing(ids[0])) if ids else []
            return self._naming[module]

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
        ``aten::sort``, ``aten::sort.stable``, ... (``indexer.select.record_join``)."""
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
        file = nodeid.split("::", 1)[0]
        tests = self.record.tests
        found = next(
            (tests[i] for i in self.tests_of_file(file) if tests[i].nodeid == nodeid), None
        )
        return found or next((t for t in tests if t.nodeid == nodeid), None)

    def name_ids_of(self, test: RecordedTest) -> set[int]:
        """Every name the test executed, through all its segments."""
        if isinstance(self.record, Record):
            return self.record.names_of(test)
        with self._lock:
            if self._names_of_worksets is None:
                self._names_of_worksets = self.record.names_of_worksets()
        return set().union(
            *(self._names_of_worksets[self.record.workset_of(s)] for s in test.segments)
        )

    def names_of(self, test: RecordedTest) -> dict[str, list[str]]:
        """Kind -> sorted texts the test executed."""
        by_kind: dict[str, list[str]] = {kind: [] for kind in KINDS}
        for name in self.name_ids_of(test):
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
        if isinstance(record, storage.StoredRecord):
            record.check()  # what describes the record whole reads it whole
        groups = self.test_groups()
        outcomes: Counter[str] = Counter()
        for (_, outcome, _), tests in groups.items():
            outcomes[outcome] += len(tests)
        kinds = Counter(kind for kind, _ in record.names)
        return {
            "path": str(self.path) if self.path else None,
            "commit": record.meta.get("commit"),
            "created_at": record.meta.get("created_at"),
            "age_seconds": self.age_seconds(),
            "tests": len(record.tests),
            "test_files": len(self.test_files()),
            "complete_tests": sum(
                len(tests)
                for (_, outcome, why), tests in groups.items()
                if not why and outcome in COMPLETE_OUTCOMES
            ),
            "unrecorded_tests": sum(len(tests) for (_, _, why), tests in groups.items() if why),
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
        names = self.record.names
        return [
            sum(1 for n in self.name_ids_of(test) if names[n][0] == kind)
            for test in self.record.tests
        ]

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
