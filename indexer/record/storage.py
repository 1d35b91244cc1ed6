"""A record on disk: integer arrays behind a small JSON header, read by parts.

Names, labels, node ids and paths are interned once as UTF-8. Segments that executed the
same set of names share one *work set* (a parametrized test's instances run the same
code), and what a work set executed is kept inverted (for each name, the work sets that
executed it): the question selection asks (which tests ran ``aten::mm``?), answered by
following name -> work sets -> segments -> tests, each an array read at the entries asked
(docs/recording.md, "The file"). A selection over a whole suite's record so reads the
few hundred names it asks about and the tests' small per-test columns, never every
test's object.

The file is canonical: names, segments and tests are sorted before writing, so the same
record is the same bytes whatever order its tests ran in (serial, xdist, merged shards).
It is written to a temporary file and renamed. Its header is checked when it is opened,
each block of its arrays when it is read (``indexer.record.sections``), and each value
where it is used (a posting that names a work set that does not exist, a test file
offset past the tests): a record that is damaged, truncated, of another format, written
wrong on purpose or not a record at all is refused with the reason (:class:`RecordError`,
one line), never read as "these tests ran nothing".
"""

from __future__ import annotations

import bisect
import hashlib
import json
import operator
import os
from array import array
from collections.abc import Iterator, Sequence
from itertools import groupby, pairwise
from pathlib import Path
from typing import Any

from indexer import durable
from indexer.errors import TorchTalkError
from indexer.record import sections
from indexer.record.model import (
    KINDS,
    OUTCOMES,
    SEGMENT_KINDS,
    Record,
    RecordedTest,
    Segment,
    meta_problem,
)
from indexer.store import array_file

MAGIC = b"torchtalk-record\n"
FORMAT = 3  # 3: work sets, read by parts; 2: names of kind "device"
KEY = f"record-v{FORMAT}"
# Formats 1 and 2 (one checksum over all, read whole) are still read (``_read_whole``):
# format 1 is format 2 without device names, and says so (its mechanisms name no
# "devices", so which devices a test used is not known).
OLD_KEYS = {"record-v2": 2, "record-v1": 1}
OLD_TYPECODES = {
    "name_kinds": "B",
    "names": "B",
    "segment_kinds": "B",
    "segment_labels": "B",
    "posting_offsets": "I",
    "posting_segments": "I",
    "test_nodeids": "B",
    "test_files": "I",
    "test_outcomes": "B",
    "test_durations": "d",
    "test_unrecorded": "I",
    "test_segment_offsets": "I",
    "test_segments": "I",
    "file_paths": "B",
    "file_hashes": "B",
}
# Format 3's sections, in the order written. "X_offsets" (one more than the items of X)
# delimit, for each item, its run in the section they precede.
TYPECODES = {
    "name_kinds": "B",  # per name
    "names": "B",  # NUL-separated
    "posting_offsets": "I",  # per name + 1
    "posting_worksets": "I",  # the work sets that executed each name
    "workset_offsets": "I",  # per work set + 1
    "workset_segments": "I",  # the segments of each work set (each segment in one)
    "segment_kinds": "B",  # per segment
    "segment_label_offsets": "I",
    "segment_labels": "B",
    "segment_test_offsets": "I",  # per segment + 1
    "segment_tests": "I",  # the tests that depend on each segment
    "test_nodeid_offsets": "I",  # per test + 1; tests sorted by (file, node id)
    "test_nodeids": "B",
    "test_outcomes": "B",
    "test_durations": "d",
    "test_unrecorded": "I",  # index into the header's reasons
    "test_segment_offsets": "I",
    "test_segments": "I",
    "file_test_offsets": "I",  # per file + 1: the tests of each file, consecutive
    "file_paths": "B",  # NUL-separated
    "file_hashes": "B",
}
COUNTS = ("names", "segments", "worksets", "tests", "files")
OLD_COUNTS = ("names", "segments", "tests", "files")


class RecordError(TorchTalkError):
    """A record that is missing, damaged, or not one TorchTalk can read."""


def _blob(texts: Sequence[str]) -> array:
    return array("B", b"\0".join(t.encode("utf-8", "surrogateescape") for t in texts))


def _texts(blob: array | bytes, count: int) -> list[str]:
    if count == 0:
        return []
    # Decoded whole, then split: a NUL is one byte in UTF-8 and never inside a sequence,
    # so the pieces are those of decoding each apart (surrogateescape's included).
    texts = bytes(blob).decode("utf-8", "surrogateescape").split("\0")
    if len(texts) != count:
        raise ValueError(f"{len(texts)} strings where {count} were expected")
    return texts


def _packed(texts: Sequence[str]) -> tuple[array, array]:
    """(offsets, bytes) of ``texts``, each followed by a NUL: one is read alone between
    its offset and the next's (less its NUL), a run of them decoded and split at once."""
    encoded = [t.encode("utf-8", "surrogateescape") + b"\0" for t in texts]
    offsets, at = array("I", [0]), 0
    for data in encoded:
        at += len(data)
        offsets.append(at)
    return offsets, array("B", b"".join(encoded))


def _header_digest(header: dict) -> str:
    fields = {k: header[k] for k in ("format", "meta", "reasons", "counts")}
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


# --- writing -------------------------------------------------------------------------------


def canonical(record: Record) -> Record:
    """The same record with names, segments and tests sorted (tests by file, then node
    id), unused names and segments dropped (a module's import work is used by its
    importers), and duplicate segments (same kind and label) merged. Segments that
    executed the same names share one frozenset: memory grows with the distinct work
    sets, not with the tests (docs/performance.md)."""
    segment_key = [(s.kind, s.label) for s in record.segments]
    used_segments = sorted(
        {segment_key[s] for t in record.tests for s in t.segments}
        | {key for key in segment_key if key[0] == "module"}
    )
    new_segment = {key: index for index, key in enumerate(used_segments)}
    sources: list[list[set[int]]] = [[] for _ in used_segments]
    for old, segment in enumerate(record.segments):
        target = new_segment.get(segment_key[old])
        if target is not None:
            sources[target].append(segment.names)
    distinct = {id(names): names for each in sources for names in each}
    used_ids = set().union(*distinct.values()) if distinct else set()
    used_names = sorted({record.names[n] for n in used_ids})
    new_name = {name: index for index, name in enumerate(used_names)}
    renamed = {old: new_name[record.names[old]] for old in used_ids}
    interned: dict[frozenset[int], frozenset[int]] = {}

    def shared(names: frozenset[int]) -> frozenset[int]:
        return interned.setdefault(names, names)

    remapped = {
        key: shared(frozenset(renamed[n] for n in names)) for key, names in distinct.items()
    }
    out = Record(
        meta=dict(record.meta), names=list(used_names), files=dict(sorted(record.files.items()))
    )
    for index, (kind, label) in enumerate(used_segments):
        parts = [remapped[id(names)] for names in sources[index]]
        names = parts[0] if len(parts) == 1 else shared(frozenset().union(*parts))
        out.segments.append(Segment(kind, label, names))  # type: ignore[arg-type]
    for test in sorted(record.tests, key=lambda t: (t.file, t.nodeid)):
        segments = sorted({new_segment[segment_key[s]] for s in test.segments})
        out.tests.append(
            RecordedTest(
                test.nodeid, test.file, test.outcome, test.duration, segments, test.unrecorded
            )
        )
    return out


def _csr(
    groups: int, pairs: Sequence[tuple[int, int]] | Iterator[tuple[int, int]]
) -> tuple[array, array]:
    """(offsets, members) of ``pairs`` (group, member), members in their order of arrival."""
    members: list[list[int]] = [[] for _ in range(groups)]
    for group, member in pairs:
        members[group].append(member)
    offsets, flat = array("I", [0]), array("I")
    for each in members:
        flat.extend(each)
        offsets.append(len(flat))
    return offsets, flat


def write(record: Record, path: Path) -> Path:
    """Write ``record`` canonically to ``path`` (temporary file, then rename)."""
    record = canonical(record)
    workset_of: dict[frozenset[int], int] = {}
    segment_worksets = array("I")
    for segment in record.segments:
        segment_worksets.append(workset_of.setdefault(frozenset(segment.names), len(workset_of)))
    posting_offsets, posting_worksets = _csr(
        len(record.names),
        ((name, index) for names, index in workset_of.items() for name in sorted(names)),
    )  # worksets in order of their ids: each name's postings ascending
    workset_offsets, workset_segments = _csr(
        len(workset_of), ((w, s) for s, w in enumerate(segment_worksets))
    )
    segment_test_offsets, segment_tests = _csr(
        len(record.segments), ((s, t) for t, test in enumerate(record.tests) for s in test.segments)
    )
    reasons = sorted({t.unrecorded for t in record.tests} | {""})
    reason_id = {reason: index for index, reason in enumerate(reasons)}
    files = sorted({t.file for t in record.tests} | set(record.files))
    file_test_offsets, at = array("I", [0]), 0
    per_file = {}
    for test in record.tests:
        per_file[test.file] = per_file.get(test.file, 0) + 1
    for file in files:
        at += per_file.get(file, 0)
        file_test_offsets.append(at)
    test_offsets, test_segments = array("I", [0]), array("I")
    for test in record.tests:
        test_segments.extend(test.segments)
        test_offsets.append(len(test_segments))
    label_offsets, labels = _packed([s.label for s in record.segments])
    nodeid_offsets, nodeids = _packed([t.nodeid for t in record.tests])
    arrays = {
        "name_kinds": array("B", [KINDS.index(kind) for kind, _ in record.names]),
        "names": _blob([text for _, text in record.names]),
        "posting_offsets": posting_offsets,
        "posting_worksets": posting_worksets,
        "workset_offsets": workset_offsets,
        "workset_segments": workset_segments,
        "segment_kinds": array("B", [SEGMENT_KINDS.index(s.kind) for s in record.segments]),
        "segment_label_offsets": label_offsets,
        "segment_labels": labels,
        "segment_test_offsets": segment_test_offsets,
        "segment_tests": segment_tests,
        "test_nodeid_offsets": nodeid_offsets,
        "test_nodeids": nodeids,
        "test_outcomes": array("B", [OUTCOMES.index(t.outcome) for t in record.tests]),
        "test_durations": array("d", [t.duration for t in record.tests]),
        "test_unrecorded": array("I", [reason_id[t.unrecorded] for t in record.tests]),
        "test_segment_offsets": test_offsets,
        "test_segments": test_segments,
        "file_test_offsets": file_test_offsets,
        "file_paths": _blob(files),
        "file_hashes": _blob([record.files.get(p, "") for p in files]),
    }
    header = {
        "key": KEY,
        "format": FORMAT,
        "meta": record.meta,
        "reasons": reasons,
        "counts": {
            "names": len(record.names),
            "segments": len(record.segments),
            "worksets": len(workset_of),
            "tests": len(record.tests),
            "files": len(files),
        },
    }
    header["header_digest"] = _header_digest(header)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with durable.atomic_output(path) as handle:
            sections.write(handle, MAGIC, header, arrays)
    except OSError as exc:
        raise RecordError(f"cannot write the record {path}: {exc.strerror or exc}") from None
    return path


# --- reading -------------------------------------------------------------------------------


def _refused(path: Path, exc: BaseException) -> RecordError:
    if isinstance(exc, FileNotFoundError):
        return RecordError(f"no record at {path}")
    if isinstance(exc, IsADirectoryError):
        return RecordError(f"{path} is a directory, not a record")
    if isinstance(exc, OSError):
        return RecordError(f"cannot read the record {path}: {exc.strerror or exc}")
    if isinstance(exc, array_file.DamagedFile):
        if str(exc) == "not a file of this kind":
            return RecordError(f"{path} is not a TorchTalk record")
        return RecordError(f"record {path} cannot be used: {exc}")
    return RecordError(f"record {path} cannot be used: damaged ({exc})")


def open_stored(path: Path) -> StoredRecord | Record:
    """The record at ``path``, its header checked and its arrays read as they are asked
    (a format 1 or 2 record: read whole); :class:`RecordError` with the reason when it
    cannot be used. FileNotFoundError is raised as RecordError too."""
    try:
        opened = sections.Sections(path, MAGIC, TYPECODES)
    except array_file.DamagedFile as exc:
        key = _key_of(path)
        if key in OLD_KEYS:
            return _read_whole(path)
        if isinstance(key, str) and key != KEY and key.startswith("record-v"):
            raise RecordError(
                f"record {path} cannot be used: written as {key!r}, not {KEY!r} "
                "(a newer TorchTalk's record: record it again, or upgrade)"
            ) from None
        raise _refused(path, exc) from None
    except (OSError, ValueError) as exc:
        raise _refused(path, exc) from None
    return StoredRecord(path, opened)


def _key_of(path: Path) -> Any:
    """The key a record's header names (None when it cannot be read)."""
    try:
        with open(path, "rb") as handle:
            if handle.readline(len(MAGIC)) != MAGIC:
                return None
            header = array_file.parse_json(handle.readline(), what="its header")
    except (OSError, ValueError):
        return None
    return header.get("key") if isinstance(header, dict) else None


def read(path: Path) -> Record:
    """The record at ``path``, whole (merge, stats, show: every value checked);
    :class:`RecordError` with the reason when it cannot be used."""
    found = open_stored(path)
    return found.decode() if isinstance(found, StoredRecord) else found


def _header_problem(header: dict, counts_named: tuple[str, ...]) -> str | None:
    """What is wrong with the header, checked once, before anything reads it: a record
    comes from elsewhere (a CI artifact, a snapshot) and may be written wrong on purpose
    with every checksum right; None when it holds what a record's header holds."""
    try:
        if header.get("header_digest") != _header_digest(header):
            return "damaged (its header checksum does not match)"
    except KeyError as exc:
        return f"damaged (its header lacks {exc})"
    if type(header.get("format")) is not int:
        return "its format is not a number"
    reasons = header.get("reasons")
    if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
        return "its reasons are not a list of strings"
    counts = header.get("counts")
    if not isinstance(counts, dict) or not all(
        type(counts.get(key)) is int and counts[key] >= 0 for key in counts_named
    ):
        return f"its counts are not whole numbers of {', '.join(counts_named)}"
    return meta_problem(header.get("meta"))


def _below(values: Sequence[int], bound: int, what: str) -> Sequence[int]:
    """``values``, each checked to be below ``bound`` (a slice read for one question)."""
    if values and max(values) >= bound:
        raise ValueError(what)
    return values


class _Tests(Sequence[RecordedTest]):
    """The tests of a stored record, each decoded when it is asked for."""

    def __init__(self, stored: StoredRecord) -> None:
        self._stored = stored
        self._made: dict[int, RecordedTest] = {}

    def __len__(self) -> int:
        return self._stored.test_count

    def __getitem__(self, index: int) -> RecordedTest:  # type: ignore[override]
        if not isinstance(index, int):
            raise TypeError("tests are asked for one at a time")
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        test = self._made.get(index)
        if test is None:
            test = self._made[index] = self._stored.make_test(index)
        return test

    def __iter__(self) -> Iterator[RecordedTest]:
        for index in range(len(self)):
            yield self[index]


class StoredRecord:
    """A format 3 record on disk, read as it is asked: the attributes of a
    :class:`Record` (``meta``, ``names``, ``files``, ``tests``) and the lookups selection
    makes. A value that is not what the header promises raises :class:`RecordError`
    (one line) where it is read."""

    def __init__(self, path: Path, opened: sections.Sections) -> None:
        self.path = path
        self._s = opened
        header = opened.header
        if header.get("key") != KEY:
            raise RecordError(
                f"record {path} cannot be used: written as {header.get('key')!r}, not {KEY!r}"
            )
        problem = _header_problem(header, COUNTS)
        if problem:
            raise RecordError(f"record {path} cannot be used: {problem}")
        if header["format"] != FORMAT:
            raise RecordError(f"record {path} cannot be used: format {header['format']}")
        self.meta: dict = header["meta"]
        self.reasons: list[str] = header["reasons"]
        counts = header["counts"]
        self.test_count: int = counts["tests"]
        self.segment_count: int = counts["segments"]
        self.workset_count: int = counts["worksets"]
        self.name_count: int = counts["names"]
        self.file_count: int = counts["files"]
        lengths = {
            "name_kinds": self.name_count,
            "posting_offsets": self.name_count + 1,
            "workset_offsets": self.workset_count + 1,
            "workset_segments": self.segment_count,
            "segment_kinds": self.segment_count,
            "segment_label_offsets": self.segment_count + 1,
            "segment_test_offsets": self.segment_count + 1,
            "test_nodeid_offsets": self.test_count + 1,
            "test_outcomes": self.test_count,
            "test_durations": self.test_count,
            "test_unrecorded": self.test_count,
            "test_segment_offsets": self.test_count + 1,
            "file_test_offsets": self.file_count + 1,
        }
        for name, length in lengths.items():
            if opened.length(name) != length:
                raise RecordError(
                    f"record {path} cannot be used: damaged ({name} is not one per item)"
                )
        self.tests: Sequence[RecordedTest] = _Tests(self)
        self._names: list[tuple[str, str]] | None = None
        self._files: dict[str, str] | None = None
        self._file_paths: list[str] | None = None
        self._offsets: dict[str, array] = {}
        self._groups: dict[tuple[str, str, str], Sequence[int]] | None = None
        self._workset_of: list[int] | None = None
        self._nodeids_by_file: dict[int, list[str]] = {}
        self._parts_by_file: dict[int, list[str] | None] = {}
        self._whole_checked_once = False

    # --- reading checked values ----------------------------------------------------------

    def _fail(self, exc: BaseException) -> RecordError:
        return _refused(self.path, exc)

    def _delimited(self, offsets: str, data: str, item: int) -> array:
        """Item ``item``'s run of section ``data``, delimited by section ``offsets``."""
        try:
            bounds = self._s.whole(offsets)  # one entry per item: small
            # read() refuses a run that ends before it starts or past the data
            return self._s.read(data, bounds[item], bounds[item + 1])
        except (ValueError, OSError) as exc:
            raise self._fail(exc) from None

    def _run(self, offsets: str, data: str, item: int) -> array:
        """Like :meth:`_delimited`, ``data`` read whole once: a few bytes per segment,
        asked for many segments at a time."""
        try:
            bounds, values = self._s.whole(offsets), self._s.whole(data)
            start, stop = bounds[item], bounds[item + 1]
            if not start <= stop <= len(values):
                raise ValueError(f"{offsets} do not match {data}")
            return values[start:stop]
        except (ValueError, IndexError, OSError) as exc:
            raise self._fail(exc) from None

    def _checked_offsets(self, offsets: str, data: str) -> array:
        """Section ``offsets``, whole, checked to rise from 0 to the length of ``data``
        (for those read whole: the files' runs of tests)."""
        found = self._offsets.get(offsets)
        if found is None:
            found = self._s.whole(offsets)
            if found[0] != 0 or found[-1] != self._s.length(data):
                raise ValueError(f"{offsets} do not match {data}")
            if any(a > b for a, b in pairwise(found)):
                raise ValueError(f"{offsets} go backwards")
            self._offsets[offsets] = found
        return found

    def _texts_of(self, offsets: str, data: str) -> list[str]:
        """Every item of ``data`` as text (for the whole record)."""
        try:
            bounds = self._checked_offsets(offsets, data)
            blob = bytes(self._s.whole(data))
        except (ValueError, OSError) as exc:
            raise self._fail(exc) from None
        if any(a >= b or blob[b - 1] != 0 for a, b in pairwise(bounds)):
            raise self._fail(ValueError(f"{data} are not NUL-terminated"))
        return [blob[a : b - 1].decode("utf-8", "surrogateescape") for a, b in pairwise(bounds)]

    # --- what Record holds ---------------------------------------------------------------

    @property
    def names(self) -> list[tuple[str, str]]:
        if self._names is None:
            try:
                texts = _texts(self._s.whole("names"), self.name_count)
                kinds = self._s.whole("name_kinds")
                _below(kinds, len(KINDS), "a name of no known kind")
                self._names = [(KINDS[k], t) for k, t in zip(kinds, texts, strict=True)]
            except (ValueError, OSError) as exc:
                raise self._fail(exc) from None
        return self._names

    @property
    def files(self) -> dict[str, str]:
        if self._files is None:
            paths = self.file_paths()
            try:
                hashes = _texts(self._s.whole("file_hashes"), self.file_count)
            except (ValueError, OSError) as exc:
                raise self._fail(exc) from None
            self._files = {p: h for p, h in zip(paths, hashes, strict=True) if h}
        return self._files

    @property
    def commit(self) -> str | None:
        return self.meta.get("commit")

    def file_paths(self) -> list[str]:
        if self._file_paths is None:
            try:
                self._file_paths = _texts(self._s.whole("file_paths"), self.file_count)
                self._checked_offsets("file_test_offsets", "test_outcomes")
            except (ValueError, OSError) as exc:
                raise self._fail(exc) from None
        return self._file_paths

    def make_test(self, index: int) -> RecordedTest:
        """Test ``index``, decoded from its columns."""
        segments = self._run("test_segment_offsets", "test_segments", index)
        try:
            _below(segments, self.segment_count, "a test names a segment that does not exist")
            outcomes, reasons, durations = self._columns()
            return RecordedTest(
                self.nodeid(index),
                self.file_of(index),
                OUTCOMES[outcomes[index]],
                durations[index],
                segments.tolist(),
                self.reasons[reasons[index]],
            )
        except (ValueError, IndexError) as exc:
            raise self._fail(exc) from None

    def nodeid(self, index: int) -> str:
        """The node id of test ``index``: its file's node ids are decoded together, once
        (a selection names many tests of the files it reaches)."""
        if not 0 <= index < self.test_count:
            raise self._fail(ValueError(f"no test {index} of {self.test_count}"))
        offsets = self._checked_offsets_or_fail("file_test_offsets", "test_outcomes")
        file = bisect.bisect_right(offsets, index) - 1
        return self._nodeids_of(file)[index - offsets[file]]

    def nodeids_in(self, file: str) -> list[str]:
        """The node ids of the tests of ``file``, in the order of their indexes."""
        paths = self.file_paths()
        at = bisect.bisect_left(paths, file)
        return self._nodeids_of(at) if at < len(paths) and paths[at] == file else []

    def parts_in(self, file: str) -> list[str] | None:
        """What follows ``FILE::`` in the node id of each test of ``file`` (a test's name
        within its file), cut from the file's node ids at once; None when one of them does
        not start with it."""
        paths = self.file_paths()
        at = bisect.bisect_left(paths, file)
        if at == len(paths) or paths[at] != file:
            return []
        if at in self._parts_by_file:  # a report names a file's tests once per reason
            return self._parts_by_file[at]
        offsets = self._checked_offsets_or_fail("file_test_offsets", "test_outcomes")
        start, stop = offsets[at], offsets[at + 1]
        if start == stop:
            return []
        bounds = self._s.whole("test_nodeid_offsets")
        try:
            if not bounds[start] < bounds[stop] <= self._s.length("test_nodeids"):
                raise ValueError("test_nodeid_offsets do not rise")
            text = self._s.raw("test_nodeids", bounds[start], bounds[stop] - 1)
        except (ValueError, OSError) as exc:
            raise self._fail(exc) from None
        chunk = text.decode("utf-8", "surrogateescape")
        prefix = file + "::"
        if not chunk.startswith(prefix) or chunk.count("\0" + prefix) != stop - start - 1:
            found = None
        elif chunk.count("\0") != stop - start - 1:
            raise self._fail(ValueError("test_nodeids do not match their offsets"))
        else:  # every NUL starts the next test's node id: cut at them with its prefix
            found = chunk[len(prefix) :].split("\0" + prefix)
        self._parts_by_file[at] = found
        return found

    def parts_of_tests(self, file: str, tests: Sequence[int]) -> list[str] | None:
        """:meth:`parts_in` for some of the tests of ``file`` (ascending indexes), in
        their order: each run of consecutive tests cut from its own bytes at once (a
        selection names a few hundred runs of its files' tests, not every test of
        them). None when one of them does not start with ``FILE::``."""
        paths = self.file_paths()
        at = bisect.bisect_left(paths, file)
        offsets = self._checked_offsets_or_fail("file_test_offsets", "test_outcomes")
        if not tests:
            return []
        if at == len(paths) or paths[at] != file or not (
            offsets[at] <= tests[0] and tests[-1] < offsets[at + 1]
        ):
            raise self._fail(ValueError(f"tests asked for are not tests of {file}"))
        bounds = self._s.whole("test_nodeid_offsets")
        prefix = file + "::"
        cut = "\0" + prefix
        found: list[str] = []
        count, start = len(tests), 0
        while start < count:
            end = start + 1
            while end < count and tests[end] == tests[end - 1] + 1:
                end += 1
            first, stop = tests[start], tests[end - 1] + 1
            try:
                if not bounds[first] < bounds[stop] <= self._s.length("test_nodeids"):
                    raise ValueError("test_nodeid_offsets do not rise")
                text = self._s.raw("test_nodeids", bounds[first], bounds[stop] - 1)
            except (ValueError, OSError) as exc:
                raise self._fail(exc) from None
            chunk = text.decode("utf-8", "surrogateescape")
            if not chunk.startswith(prefix) or chunk.count(cut) != stop - first - 1:
                return None
            if chunk.count("\0") != stop - first - 1:
                raise self._fail(ValueError("test_nodeids do not match their offsets"))
            found += chunk[len(prefix) :].split(cut)
            start = end
        return found

    def nodeids_seen_whole(self) -> list[str]:
        """As :meth:`Record.nodeids_seen_whole`, from the node ids and the unrecorded
        column alone: no test's segments are decoded (docs/performance.md, "Completing a
        record: what BASE costs")."""
        if not self.test_count:
            return []
        _, reasons, _ = self._columns()
        nodeids = self.nodeids(0, self.test_count)
        try:
            pairs = list(zip(nodeids, reasons, strict=True))
        except ValueError as exc:
            raise self._fail(exc) from None
        return [nodeid for nodeid, reason in pairs if not self.reasons[reason]]

    def _nodeids_of(self, file: int) -> list[str]:
        found = self._nodeids_by_file.get(file)
        if found is None:
            offsets = self._checked_offsets_or_fail("file_test_offsets", "test_outcomes")
            found = self._nodeids_by_file[file] = self.nodeids(offsets[file], offsets[file + 1])
        return found

    def nodeids(self, start: int, stop: int) -> list[str]:
        """The node ids of tests ``start:stop``, read and decoded in one piece."""
        if start == stop:
            return []
        try:
            bounds = self._s.whole("test_nodeid_offsets")
            if not 0 <= start < stop < len(bounds) or bounds[start] >= bounds[stop]:
                raise ValueError(f"tests {start}:{stop} of {len(bounds) - 1}")
            data = self._s.raw("test_nodeids", bounds[start], bounds[stop] - 1)
            texts = data.decode("utf-8", "surrogateescape").split("\0")
            if len(texts) != stop - start:
                raise ValueError("test_nodeids do not match their offsets")
            return texts
        except (ValueError, OSError) as exc:
            raise self._fail(exc) from None

    def _columns(self) -> tuple[array, array, array]:
        """The tests' outcomes, reasons and durations, whole (a few bytes a test)."""
        outcomes, reasons = self._outcomes()
        try:
            durations = self._s.whole("test_durations")
        except (ValueError, OSError) as exc:
            raise self._fail(exc) from None
        return outcomes, reasons, durations

    def _outcomes(self) -> tuple[array, array]:
        """The tests' outcomes and reasons, whole (what trusting them reads: not their
        durations, 8 bytes a test)."""
        outcomes = self._whole_checked("test_outcomes", len(OUTCOMES), "an unknown outcome")
        reasons = self._whole_checked("test_unrecorded", len(self.reasons), "an unknown reason")
        return outcomes, reasons

    def file_of(self, test: int) -> str:
        offsets = self._checked_offsets_or_fail("file_test_offsets", "test_outcomes")
        return self.file_paths()[bisect.bisect_right(offsets, test) - 1]

    def _checked_offsets_or_fail(self, offsets: str, data: str) -> array:
        try:
            return self._checked_offsets(offsets, data)
        except (ValueError, OSError) as exc:
            raise self._fail(exc) from None

    # --- the lookups selection makes -----------------------------------------------------

    def segments_executing(self, name: int) -> list[int]:
        """The segments that executed the name with id ``name``."""
        found: list[int] = []
        for workset in self.worksets_executing(name):
            found.extend(self.segments_of_workset(workset))
        return found

    def worksets_executing(self, name: int) -> array:
        """The work sets that executed the name with id ``name``: its postings."""
        worksets = self._delimited("posting_offsets", "posting_worksets", name)
        try:
            return _below(
                worksets, self.workset_count, "a posting names a work set that does not exist"
            )  # type: ignore[return-value]
        except ValueError as exc:
            raise self._fail(exc) from None

    def segments_of_workset(self, workset: int) -> array:
        segments = self._run("workset_offsets", "workset_segments", workset)
        try:
            return _below(
                segments, self.segment_count, "a work set names a segment that does not exist"
            )  # type: ignore[return-value]
        except ValueError as exc:
            raise self._fail(exc) from None

    def tests_of_segment(self, segment: int) -> array:
        tests = self._run("segment_test_offsets", "segment_tests", segment)
        try:
            return _below(tests, self.test_count, "a segment names a test that does not exist")  # type: ignore[return-value]
        except ValueError as exc:
            raise self._fail(exc) from None

    def tests_of_segments(self, segments: Sequence[int]) -> tuple[list[int], list[int]]:
        """The tests of each of ``segments``, one segment's after another, and how many
        each has: read and checked together, in C where each has one (a selection asks
        for tens of thousands of tests' own segments at once)."""
        try:
            bounds, values = self._s.whole("segment_test_offsets"), self._s.whole("segment_tests")
            starts = list(map(bounds.__getitem__, segments))
            stops = list(map(bounds.__getitem__, map((1).__add__, segments)))
            counts = list(map(operator.sub, stops, starts))
            if segments and (min(counts) < 0 or max(stops) > len(values)):
                raise ValueError("segment_test_offsets do not match segment_tests")
            if counts.count(1) == len(counts):
                found = list(map(values.__getitem__, starts))
            else:
                found = []
                for start, count in zip(starts, counts, strict=True):
                    if count == 1:
                        found.append(values[start])
                    elif count:
                        found += values[start : start + count]
            if found and max(found) >= self.test_count:
                raise ValueError("a segment names a test that does not exist")
            return found, counts
        except (ValueError, IndexError, OSError) as exc:
            raise self._fail(exc) from None

    def segment_kind(self, segment: int) -> str:
        kinds = self._whole_checked(
            "segment_kinds", len(SEGMENT_KINDS), "a segment of no known kind"
        )
        return SEGMENT_KINDS[kinds[segment]]

    def segment_kinds(self, segments: Sequence[int]) -> list[str]:
        """:meth:`segment_kind` of each of ``segments``."""
        kinds = self._whole_checked(
            "segment_kinds", len(SEGMENT_KINDS), "a segment of no known kind"
        )
        return [SEGMENT_KINDS[kinds[segment]] for segment in segments]

    def segment_label(self, segment: int) -> str:
        label = bytes(self._delimited("segment_label_offsets", "segment_labels", segment))
        if not label.endswith(b"\0"):
            raise self._fail(ValueError("segment_labels are not NUL-terminated"))
        return label[:-1].decode("utf-8", "surrogateescape")

    def _whole_checked(self, name: str, bound: int, what: str) -> array:
        if name not in self._offsets:
            try:
                self._offsets[name] = _below(self._s.whole(name), bound, what)  # type: ignore[assignment]
            except (ValueError, OSError) as exc:
                raise self._fail(exc) from None
        return self._offsets[name]

    def test_groups(self) -> dict[tuple[str, str, str], Sequence[int]]:
        """(file, outcome, why unrecorded) -> the tests that share them: what deciding
        which tests to trust reads, without a test's object."""
        if self._groups is None:
            outcomes, reasons = self._outcomes()
            offsets = self._checked_offsets_or_fail("file_test_offsets", "test_outcomes")
            paths = self.file_paths()
            groups: dict[tuple[str, str, str], Sequence[int]] = {}
            for file, start, stop in zip(paths, offsets, offsets[1:], strict=False):
                if start == stop:
                    continue
                first = outcomes[start]
                if (
                    outcomes[start:stop].count(first) == stop - start
                    and reasons[start:stop].count(reasons[start]) == stop - start
                ):  # the common case, counted in C: one group for the whole file
                    groups[(file, OUTCOMES[first], self.reasons[reasons[start]])] = range(
                        start, stop
                    )
                    continue
                # Outcomes and reasons come in runs (a template's instances): run by run.
                keys: dict[tuple[int, int], list[int]] = {}
                at = start
                for key, run in groupby(zip(outcomes[start:stop], reasons[start:stop], strict=True)):
                    length = len(list(run))
                    keys.setdefault(key, []).extend(range(at, at + length))
                    at += length
                for (outcome, reason), tests in keys.items():
                    groups[(file, OUTCOMES[outcome], self.reasons[reason])] = tests
            self._groups = groups
        return self._groups

    def tests_of_file(self, file: str) -> range:
        paths = self.file_paths()
        at = bisect.bisect_left(paths, file)
        if at == len(paths) or paths[at] != file:
            return range(0)
        offsets = self._checked_offsets_or_fail("file_test_offsets", "test_outcomes")
        return range(offsets[at], offsets[at + 1])

    def workset_of(self, segment: int) -> int:
        """The work set of ``segment`` (the inverse made once: for show and stats)."""
        if self._workset_of is None:
            workset_of = [0] * self.segment_count
            for workset in range(self.workset_count):
                for each in self.segments_of_workset(workset):
                    workset_of[each] = workset
            self._workset_of = workset_of
        return self._workset_of[segment]

    def names_of_worksets(self) -> list[frozenset[int]]:
        """What each work set executed (every posting read: for the whole record)."""
        offsets = self._checked_offsets_or_fail("posting_offsets", "posting_worksets")
        try:
            flat = _below(self._s.whole("posting_worksets"), self.workset_count,
                          "a posting names a work set that does not exist")  # fmt: skip
        except (ValueError, OSError) as exc:
            raise self._fail(exc) from None
        names: list[list[int]] = [[] for _ in range(self.workset_count)]
        for name in range(self.name_count):
            for workset in flat[offsets[name] : offsets[name + 1]]:
                names[workset].append(name)
        return [frozenset(each) for each in names]

    def check(self) -> None:
        """Read every block and check every value a lookup would check where it reads it
        (what describes the record whole, ``record stats`` and ``status``, and what
        installs it, ``snapshot import``, says nothing of one that is damaged)."""
        if self._whole_checked_once:
            return
        for name in TYPECODES:
            try:
                self._s.whole(name)
            except (ValueError, OSError) as exc:
                raise self._fail(exc) from None
        self.names_of_worksets()
        for offsets, data in (
            ("workset_offsets", "workset_segments"),
            ("segment_label_offsets", "segment_labels"),
            ("segment_test_offsets", "segment_tests"),
            ("test_nodeid_offsets", "test_nodeids"),
            ("test_segment_offsets", "test_segments"),
        ):
            self._checked_offsets_or_fail(offsets, data)
        for data, bound, what in (
            (
                "workset_segments",
                self.segment_count,
                "a work set names a segment that does not exist",
            ),
            ("segment_tests", self.test_count, "a segment names a test that does not exist"),
            ("test_segments", self.segment_count, "a test names a segment that does not exist"),
            ("segment_kinds", len(SEGMENT_KINDS), "a segment of no known kind"),
        ):
            self._whole_checked(data, bound, what)
        self._columns()
        self.file_paths()
        _ = self.names, self.files
        self._whole_checked_once = True

    def decode(self) -> Record:
        """The whole record in memory, every value checked."""
        names_of = self.names_of_worksets()
        record = Record(meta=self.meta, names=list(self.names), files=dict(self.files))
        workset_of = [self.workset_of(segment) for segment in range(self.segment_count)]
        kinds = self._whole_checked(
            "segment_kinds", len(SEGMENT_KINDS), "a segment of no known kind"
        )
        labels = self._texts_of("segment_label_offsets", "segment_labels")
        record.segments = [
            Segment(SEGMENT_KINDS[kind], label, names_of[workset])  # type: ignore[arg-type]
            for kind, label, workset in zip(kinds, labels, workset_of, strict=True)
        ]
        nodeids = self._texts_of("test_nodeid_offsets", "test_nodeids")
        outcomes, reasons, durations = self._columns()
        try:
            bounds = self._checked_offsets("test_segment_offsets", "test_segments")
            flat = _below(self._s.whole("test_segments"), self.segment_count,
                          "a test names a segment that does not exist")  # fmt: skip
        except (ValueError, OSError) as exc:
            raise self._fail(exc) from None
        offsets = self._checked_offsets_or_fail("file_test_offsets", "test_outcomes")
        for file, start, stop in zip(self.file_paths(), offsets, offsets[1:], strict=False):
            record.tests.extend(
                RecordedTest(nodeids[i], file, OUTCOMES[outcomes[i]], durations[i],
                             flat[bounds[i] : bounds[i + 1]].tolist(), self.reasons[reasons[i]])
                for i in range(start, stop)
            )  # fmt: skip
        return record


# --- formats 1 and 2: one checksum over the whole file, read whole -------------------------


def _read_whole(path: Path) -> Record:
    try:
        header, arrays = _read_old_arrays(path)
    except (OSError, array_file.DamagedFile) as exc:
        raise _refused(path, exc) from None
    problem = _header_problem(header, OLD_COUNTS)
    if problem:
        raise RecordError(f"record {path} cannot be used: {problem}")
    try:
        return _decode_old(header, arrays)
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise RecordError(f"record {path} cannot be used: damaged ({exc})") from None


def _read_old_arrays(path: Path) -> tuple[dict, dict[str, array]]:
    """(header, arrays) of a format 1 or 2 record; DamagedFile saying why otherwise."""
    with open(path, "rb") as handle:
        if handle.readline(len(MAGIC)) != MAGIC:
            raise array_file.DamagedFile("not a file of this kind")
        key = array_file.parse_json(handle.readline(), what="its header")
    key = key.get("key") if isinstance(key, dict) else None
    if key not in OLD_KEYS:
        raise array_file.DamagedFile(f"written as {key!r}, not {KEY!r}")
    return array_file.read_checked(path, MAGIC, key, OLD_TYPECODES)


def _decode_old(header: dict, arrays: dict[str, array]) -> Record:
    counts = header["counts"]
    reasons = header["reasons"]
    names_text = _texts(arrays["names"], counts["names"])
    names = [(KINDS[k], t) for k, t in zip(arrays["name_kinds"], names_text, strict=True)]
    labels = _texts(arrays["segment_labels"], counts["segments"])
    offsets, flat = arrays["posting_offsets"], arrays["posting_segments"]
    if len(offsets) != len(names) + 1 or offsets[-1] != len(flat):
        raise ValueError("posting lists do not match the names")
    _below(flat, len(labels), "a posting names a work set that does not exist")
    names_of: list[list[int]] = [[] for _ in labels]
    for name in range(len(names)):
        for segment in flat[offsets[name] : offsets[name + 1]]:
            names_of[segment].append(name)
    interned: dict[frozenset[int], frozenset[int]] = {}  # segments that ran the same share
    segments = [
        Segment(SEGMENT_KINDS[k], label, interned.setdefault(frozenset(ids), frozenset(ids)))  # type: ignore[arg-type]
        for k, label, ids in zip(arrays["segment_kinds"], labels, names_of, strict=True)
    ]
    files = _texts(arrays["file_paths"], counts["files"])
    hashes = _texts(arrays["file_hashes"], counts["files"])
    record = Record(meta=header["meta"], names=names, segments=segments)
    record.files = {p: h for p, h in zip(files, hashes, strict=True) if h}
    nodeids = _texts(arrays["test_nodeids"], counts["tests"])
    test_offsets, test_segments = arrays["test_segment_offsets"], arrays["test_segments"]
    if len(test_offsets) != len(nodeids) + 1 or test_offsets[-1] != len(test_segments):
        raise ValueError("test segments do not match the tests")
    _below(test_segments, len(segments), "a test names a segment that does not exist")
    per_test = ("test_files", "test_outcomes", "test_durations", "test_unrecorded")
    if {len(arrays[key]) for key in per_test} != {len(nodeids)}:
        raise ValueError("the tests' arrays are not one per test")
    record.tests = [
        RecordedTest(nodeid, files[file], OUTCOMES[outcome], duration,
                     test_segments[start:end].tolist(), reasons[reason])
        for nodeid, file, outcome, duration, reason, start, end in zip(
            nodeids, arrays["test_files"], arrays["test_outcomes"], arrays["test_durations"],
            arrays["test_unrecorded"], test_offsets, test_offsets[1:], strict=False,
        )
    ]  # fmt: skip
    return record


def size_on_disk(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
