"""A record on disk: one checksummed file of integer arrays behind a small JSON header.

Names, segment labels, node ids and paths are interned once as NUL-separated UTF-8; what a
segment executed is kept inverted (for each name, the segments that executed it), which
is the question selection asks (which tests ran ``aten::mm``?) and the compact way round:
work shared by many tests is one short posting list, not a copy per test.

The file is canonical: names, segments and tests are sorted before writing, so the same
record is the same bytes whatever order its tests ran in (serial, xdist, merged shards).
It is written to a temporary file and renamed, and read back only whole: its arrays and
its header are checksummed, and a record that is damaged, truncated, of another format or
not a record at all is refused with the reason, never read as "these tests ran nothing".
"""

from __future__ import annotations

import hashlib
import json
import os
from array import array
from pathlib import Path

from indexer.errors import TorchTalkError
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
FORMAT = 2  # 2: names of kind "device"
KEY = f"record-v{FORMAT}"
# Format 1 is format 2 without device names. Read as it is, it says what is true: its
# mechanisms name no "devices", so which devices a test used is not known.
FORMAT_1_KEY = "record-v1"
TYPECODES = {
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


class RecordError(TorchTalkError):
    """A record that is missing, damaged, or not one TorchTalk can read."""


def _blob(texts: list[str]) -> array:
    return array("B", b"\0".join(t.encode("utf-8", "surrogateescape") for t in texts))


def _texts(blob: array, count: int) -> list[str]:
    if count == 0:
        return []
    texts = bytes(blob).split(b"\0")
    if len(texts) != count:
        raise ValueError(f"{len(texts)} strings where {count} were expected")
    return [t.decode("utf-8", "surrogateescape") for t in texts]


def _all_below(values: array, bound: int) -> bool:
    """Whether every value of ``values`` is below ``bound``: ``max()``, ~35 ns of CPU a
    value; byte-lane comparisons in C did no better in their worst case (docs/performance.md)."""
    return max(values, default=-1) < bound


def _header_digest(header: dict) -> str:
    fields = {k: header[k] for k in ("format", "meta", "reasons", "counts")}
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def canonical(record: Record) -> Record:
    """The same record with names, segments and tests sorted, unused names and segments
    dropped (a module's import work is used by its importers), and duplicate segments
    (same kind and label) merged."""
    segment_key = {i: (s.kind, s.label) for i, s in enumerate(record.segments)}
    used_segments = sorted(
        {segment_key[s] for t in record.tests for s in t.segments}
        | {key for key in segment_key.values() if key[0] == "module"}
    )
    new_segment = {key: index for index, key in enumerate(used_segments)}
    names_of: dict[int, set[int]] = {index: set() for index in range(len(used_segments))}
    for old, segment in enumerate(record.segments):
        target = new_segment.get(segment_key[old])
        if target is not None:
            names_of[target] |= segment.names
    used_names = sorted({record.names[n] for names in names_of.values() for n in names})
    new_name = {name: index for index, name in enumerate(used_names)}
    out = Record(
        meta=dict(record.meta), names=list(used_names), files=dict(sorted(record.files.items()))
    )
    for index, (kind, label) in enumerate(used_segments):
        names = {new_name[record.names[n]] for n in names_of[index]}
        out.segments.append(Segment(kind, label, names))
    for test in sorted(record.tests, key=lambda t: t.nodeid):
        segments = sorted({new_segment[segment_key[s]] for s in test.segments})
        out.tests.append(
            RecordedTest(
                test.nodeid, test.file, test.outcome, test.duration, segments, test.unrecorded
            )
        )
    return out


def write(record: Record, path: Path) -> Path:
    """Write ``record`` canonically to ``path`` (temporary file, then rename)."""
    record = canonical(record)
    postings: list[list[int]] = [[] for _ in record.names]
    for index, segment in enumerate(record.segments):
        for name in segment.names:
            postings[name].append(index)
    offsets, flat = array("I", [0]), array("I")
    for segments in postings:
        flat.extend(sorted(segments))
        offsets.append(len(flat))
    reasons = sorted({t.unrecorded for t in record.tests} | {""})
    reason_id = {reason: index for index, reason in enumerate(reasons)}
    files = sorted({t.file for t in record.tests} | set(record.files))
    file_id = {path: index for index, path in enumerate(files)}
    test_offsets, test_segments = array("I", [0]), array("I")
    for test in record.tests:
        test_segments.extend(test.segments)
        test_offsets.append(len(test_segments))
    arrays = {
        "name_kinds": array("B", [KINDS.index(kind) for kind, _ in record.names]),
        "names": _blob([text for _, text in record.names]),
        "segment_kinds": array("B", [SEGMENT_KINDS.index(s.kind) for s in record.segments]),
        "segment_labels": _blob([s.label for s in record.segments]),
        "posting_offsets": offsets,
        "posting_segments": flat,
        "test_nodeids": _blob([t.nodeid for t in record.tests]),
        "test_files": array("I", [file_id[t.file] for t in record.tests]),
        "test_outcomes": array("B", [OUTCOMES.index(t.outcome) for t in record.tests]),
        "test_durations": array("d", [t.duration for t in record.tests]),
        "test_unrecorded": array("I", [reason_id[t.unrecorded] for t in record.tests]),
        "test_segment_offsets": test_offsets,
        "test_segments": test_segments,
        "file_paths": _blob(files),
        "file_hashes": _blob([record.files.get(p, "") for p in files]),
    }
    header = {
        "format": FORMAT,
        "meta": record.meta,
        "reasons": reasons,
        "counts": {
            "names": len(record.names),
            "segments": len(record.segments),
            "tests": len(record.tests),
            "files": len(files),
        },
    }
    header["header_digest"] = _header_digest(header)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not array_file.write(path, MAGIC, KEY, header, arrays):
        raise RecordError(f"cannot write the record {path}")
    return path


def read(path: Path) -> Record:
    """The record at ``path``; :class:`RecordError` with the reason when it cannot be used."""
    try:
        header, arrays = _read_arrays(path)
    except FileNotFoundError:
        raise RecordError(f"no record at {path}") from None
    except IsADirectoryError:
        raise RecordError(f"{path} is a directory, not a record") from None
    except OSError as exc:
        raise RecordError(f"cannot read the record {path}: {exc.strerror or exc}") from None
    except array_file.DamagedFile as exc:
        if str(exc) == "not a file of this kind":
            raise RecordError(f"{path} is not a TorchTalk record") from None
        raise RecordError(f"record {path} cannot be used: {exc}") from None
    problem = _header_problem(header)
    if problem:
        raise RecordError(f"record {path} cannot be used: {problem}")
    try:
        return _decode(header, arrays)
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise RecordError(f"record {path} cannot be used: damaged ({exc})") from None


def _read_arrays(path: Path) -> tuple[dict, dict[str, array]]:
    try:
        return array_file.read_checked(path, MAGIC, KEY, TYPECODES)
    except array_file.DamagedFile as exc:
        if not str(exc).startswith(f"written as {FORMAT_1_KEY!r}"):
            raise
    return array_file.read_checked(path, MAGIC, FORMAT_1_KEY, TYPECODES)


COUNTS = ("names", "segments", "tests", "files")
_PER_TEST = ("test_files", "test_outcomes", "test_durations", "test_unrecorded")


def _header_problem(header: dict) -> str | None:
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
        type(counts.get(key)) is int and counts[key] >= 0 for key in COUNTS
    ):
        return f"its counts are not whole numbers of {', '.join(COUNTS)}"
    return meta_problem(header.get("meta"))


def _decode(header: dict, arrays: dict[str, array]) -> Record:
    counts = header["counts"]
    reasons = header["reasons"]
    names_text = _texts(arrays["names"], counts["names"])
    names = [(KINDS[k], t) for k, t in zip(arrays["name_kinds"], names_text, strict=True)]
    labels = _texts(arrays["segment_labels"], counts["segments"])
    kinds = arrays["segment_kinds"]
    offsets, flat = arrays["posting_offsets"], arrays["posting_segments"]
    if len(offsets) != len(names) + 1 or offsets[-1] != len(flat):
        raise ValueError("posting lists do not match the names")
    if not _all_below(flat, len(labels)):
        raise ValueError("a posting names a segment that does not exist")

    def fill() -> None:
        # Selection reads the postings; what each segment executed is made only for
        # those who ask (show --test, merge, stats), once for the whole record.
        for segment in segments:
            segment.names = set()
        for name in range(len(names)):
            for segment in flat[offsets[name] : offsets[name + 1]]:
                segments[segment].names.add(name)

    segments = [
        Segment(SEGMENT_KINDS[k], label, fill=fill) for k, label in zip(kinds, labels, strict=True)
    ]
    files = _texts(arrays["file_paths"], counts["files"])
    hashes = _texts(arrays["file_hashes"], counts["files"])
    record = Record(meta=header["meta"], names=names, segments=segments)
    record.postings = lambda name: flat[offsets[name] : offsets[name + 1]]
    record.files = {p: h for p, h in zip(files, hashes, strict=True) if h}
    nodeids = _texts(arrays["test_nodeids"], counts["tests"])
    test_offsets, test_segments = arrays["test_segment_offsets"], arrays["test_segments"]
    if len(test_offsets) != len(nodeids) + 1 or test_offsets[-1] != len(test_segments):
        raise ValueError("test segments do not match the tests")
    if not _all_below(test_segments, len(segments)):
        raise ValueError("a test names a segment that does not exist")
    # One pass over the tests' arrays together; zip(strict) refuses arrays of another
    # length than the tests, indexing refuses an id out of range.
    ends = iter(test_offsets)
    next(ends)
    record.tests = [
        RecordedTest(nodeid, files[file], OUTCOMES[outcome], duration,
                     test_segments[start:end].tolist(), reasons[reason])
        for nodeid, file, outcome, duration, reason, start, end in zip(
            nodeids, arrays["test_files"], arrays["test_outcomes"], arrays["test_durations"],
            arrays["test_unrecorded"], test_offsets, ends, strict=False,
        )
    ]  # fmt: skip
    lengths = {len(arrays[key]) for key in _PER_TEST}
    if lengths != {len(nodeids)}:
        raise ValueError("the tests' arrays are not one per test")
    return record


def size_on_disk(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
