"""A record as it is made: an append-only journal, one checksummed entry per finished test.

A recording process appends to ``<record>.journal/<name>.ttj`` as each test ends, so a run
that is stopped (SIGTERM, SIGKILL, an OOM kill, a CI timeout, a crash) still leaves the
tests that finished. The journal becomes the record at the end of the session, or at
``torchtalk record finalize`` / ``record merge`` after a run that never reached its end
(docs/recording.md#durable-recording).

The file is a magic line and then one entry per line: ``<16 hex digits> <JSON>\\n``, the
digits a BLAKE2b checksum of the JSON. An entry carries what is new since the previous
one: names interned since (in id order, so ids are the writer's), segments added since,
names added to earlier segments (a module fixture's setup, a module's import work), the
content hashes of newly named files, and the test. So every segment a test links to is in
the journal, in the same entry or an earlier one, before the test is. A last entry cut
short or failing its checksum is dropped (a torn write); an entry that does not follow on
from the one before ends the reading there.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from indexer.record import native
from indexer.record.files import content_hash, path_of_name
from indexer.record.merge import merge
from indexer.record.model import KINDS, OUTCOMES, SEGMENT_KINDS, Record, RecordedTest
from indexer.record.storage import MAGIC as STORAGE_MAGIC
from indexer.record.storage import RecordError, canonical

MAGIC = b"torchtalk-journal 1\n"
SUFFIX = ".ttj"
DIR_SUFFIX = ".journal"
KILLED = (
    "the run stopped before its end (killed: SIGKILL, an OOM kill, a crash, or os._exit "
    "as pytest-timeout's thread method does); the tests that finished are kept"
)


def journal_dir(record_path: Path) -> Path:
    """Where the journals of a run recording to ``record_path`` live."""
    return record_path.with_name(record_path.name + DIR_SUFFIX)


def record_path_of(directory: Path) -> Path | None:
    """The record a journal directory belongs to, or None for a directory not named so."""
    if not directory.name.endswith(DIR_SUFFIX) or directory.name == DIR_SUFFIX:
        return None
    return directory.with_name(directory.name[: -len(DIR_SUFFIX)])


def journals_in(directory: Path) -> list[Path]:
    try:
        return sorted(p for p in directory.iterdir() if p.name.endswith(SUFFIX) and p.is_file())
    except OSError:
        return []


def is_journal(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def is_record(path: Path) -> bool:
    """Whether ``path`` starts as a record TorchTalk writes (one it may write over)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(len(STORAGE_MAGIC)) == STORAGE_MAGIC
    except OSError:
        return False


def _digest(payload: bytes) -> bytes:
    return hashlib.blake2b(payload, digest_size=8).hexdigest().encode()


def _line(entry: dict) -> bytes:
    # ASCII JSON holds no raw newline: one entry is one line.
    payload = json.dumps(entry, separators=(",", ":"), ensure_ascii=True).encode()
    return _digest(payload) + b" " + payload + b"\n"


class EmptyJournal(RecordError):
    """A journal whose start entry was never written whole: it holds no test."""


class JournalWriter:
    """Appends a recording process's entries; one ``os.write`` per entry, no buffer in
    between, so what a test's end wrote survives the process being killed."""

    def __init__(self, path: Path, root: Path, meta: dict) -> None:
        self.path = path
        self.root = root
        self._names = 0  # names and segments of the record already written
        self._segments = 0
        self._hashed: set[str] = set()
        self._entries = 0
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o666)
        self._pid = os.getpid()
        start = {"t": "start", "meta": meta, "pid": self._pid, "host": os.uname().nodename}
        self._write(MAGIC + _line(start))

    def _write(self, data: bytes) -> None:
        if os.getpid() != self._pid:
            return  # a forked child that ran on into pytest's code: the journal is not its
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def _delta(self, record: Record, added: dict[int, list[int]], also: str = "") -> dict:
        """What is new since the last entry; counted as written by :meth:`_append`."""
        names = record.names[self._names :]
        segments = record.segments[self._segments :]
        files: dict[str, str | None] = {}
        for path in [path_of_name(kind, text) for kind, text in names] + [also]:
            if path and path not in self._hashed and path not in files:
                files[path] = self._hash(path)
        return {
            "n0": self._names,
            "names": [[KINDS.index(kind), text] for kind, text in names],
            "s0": self._segments,
            "segments": [[SEGMENT_KINDS.index(s.kind), s.label] for s in segments],
            "add": {str(segment): ids for segment, ids in added.items() if ids},
            "files": files,
        }

    def _append(self, entry: dict) -> None:
        files = entry["files"]
        entry["files"] = {p: h for p, h in files.items() if h is not None}
        self._write(_line(entry))
        # Counted only once written: an entry cut short by a signal is sent again whole.
        self._names += len(entry["names"])
        self._segments += len(entry["segments"])
        self._hashed.update(files)
        self._entries += 1

    def _hash(self, path: str) -> str | None:
        try:
            return content_hash((self.root / path).read_bytes())
        except OSError:
            return None  # generated into the wheel only, or outside the tree

    def test(self, record: Record, added: dict[int, list[int]], test: RecordedTest) -> None:
        """Append a finished test with everything recorded since the last entry."""
        with native.quiet():  # the recorder's own work
            entry = self._delta(record, added, also=test.file)
            entry["t"] = "test"
            entry["test"] = [
                test.nodeid, test.file, OUTCOMES.index(test.outcome), test.duration,
                test.segments, test.unrecorded,
            ]  # fmt: skip
            self._append(entry)

    def close(self, record: Record, added: dict[int, list[int]], end: dict) -> None:
        """The last entry: what the session's end recorded, and ``end`` (meta to update,
        ``interrupted``: why the run stopped early, or None); then synced and closed."""
        entry = self._delta(record, added)
        entry["t"] = "end"
        entry["end"] = end
        try:
            self._append(entry)
            os.fsync(self._fd)  # once per process: a killed process's writes are in the OS
        finally:
            os.close(self._fd)
            self._fd = -1


class _Reading:
    def __init__(self) -> None:
        self.record = Record(meta={})
        self.start: dict | None = None
        self.end: dict | None = None

    def apply(self, entry: dict) -> None:
        kind = entry["t"]
        if kind == "start":
            if self.start is not None or not isinstance(entry["meta"], dict):
                raise ValueError("a second start")
            self.start = entry
            return
        if self.start is None or self.end is not None:
            raise ValueError("an entry outside the run")
        record = self.record
        if entry["n0"] != len(record.names) or entry["s0"] != len(record.segments):
            raise ValueError("it does not follow on from the entry before")
        for kind_index, text in entry["names"]:
            record.names.append((KINDS[_index(kind_index, len(KINDS))], _text(text)))
        for kind_index, label in entry["segments"]:
            record.add_segment(SEGMENT_KINDS[_index(kind_index, len(SEGMENT_KINDS))], _text(label))
        for segment, ids in entry["add"].items():
            names = record.segments[_index(int(segment), len(record.segments))].names
            names.update(_index(n, len(record.names)) for n in ids)
        for path, digest in entry["files"].items():
            record.files[_text(path)] = _text(digest)
        if kind == "end":
            if not isinstance(entry["end"], dict):
                raise TypeError("an end of the wrong type")
            self.end = entry["end"]
            return
        if kind != "test":
            raise ValueError(f"unknown entry {kind!r}")
        nodeid, file, outcome, duration, segments, unrecorded = entry["test"]
        if not isinstance(duration, (int, float)):
            raise TypeError("a duration of the wrong type")
        record.tests.append(
            RecordedTest(
                _text(nodeid), _text(file), OUTCOMES[_index(outcome, len(OUTCOMES))],
                float(duration), [_index(s, len(record.segments)) for s in segments],
                _text(unrecorded),
            )
        )  # fmt: skip


def _index(value: object, bound: int) -> int:
    if type(value) is not int or not 0 <= value < bound:
        raise ValueError(f"an index out of range ({value!r})")
    return value


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError("a string of the wrong type")
    return value


def read(path: Path) -> Record:
    """The record a journal holds, its meta saying whether the run ended (``partial``,
    ``partial_reasons``); RecordError when it is not a journal or holds no start."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RecordError(f"cannot read the journal {path}: {exc.strerror or exc}") from None
    if not data.startswith(MAGIC):
        raise RecordError(f"{path} is not a TorchTalk journal")
    lines = data[len(MAGIC) :].split(b"\n")
    torn = lines.pop()  # after the last newline: empty unless the last write was cut short
    reading = _Reading()
    reasons: list[str] = []
    for number, line in enumerate(lines, 1):
        digest, _, payload = line.partition(b" ")
        problem = ""
        if digest != _digest(payload):
            problem = "fails its checksum"
        else:
            try:
                reading.apply(json.loads(payload))
            except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
                problem = f"cannot be used ({exc})"
        if problem:
            if number == 1:
                raise EmptyJournal(f"journal {path} holds nothing: its start entry {problem}")
            if number == len(lines) and not torn:
                reasons.append("its last entry was torn (dropped)")
            else:
                reasons.append(
                    f"entry {number} of {len(lines)} {problem}: it and those after it dropped"
                )
            break
    if torn:
        reasons.append("its last entry was torn (dropped)")
    if reading.start is None:
        raise EmptyJournal(f"journal {path} holds nothing: its start entry was never written")
    record = reading.record
    record.meta = dict(reading.start["meta"])
    end = reading.end
    if end is None:
        reasons.insert(0, KILLED)
    else:
        if not isinstance(end.get("meta", {}), dict):
            raise RecordError(f"journal {path} cannot be used: its end entry is damaged")
        record.meta.update(end.get("meta") or {})
        if end.get("interrupted"):
            reasons.insert(0, f"interrupted: {end['interrupted']}")
    record.meta["partial"] = bool(reasons)
    record.meta["partial_reasons"] = reasons
    return record


def finalize(paths: list[Path]) -> Record:
    """One record from the journals of a run (its processes, its xdist workers): their
    union (``merge``), partial where any of them is. A journal that holds nothing (its
    process was killed while starting) adds nothing."""
    records = []
    for path in paths:
        try:
            records.append(read(path))
        except EmptyJournal:
            continue
    if not records:
        raise RecordError(
            "the journals hold no run: "
            + (", ".join(str(p) for p in paths) if paths else "no journal given")
        )
    # One process's journal is that run's record as it always was; several (xdist
    # workers) are parts, as they always were.
    return canonical(records[0]) if len(records) == 1 else merge(records)


def running_pid(path: Path) -> int | None:
    """The process still writing the journal at ``path`` on this machine, if any."""
    try:
        with open(path, "rb") as handle:
            first = handle.read(64 * 1024).split(b"\n", 2)
        start = json.loads(first[1].partition(b" ")[2])
        pid, host = int(start["pid"]), start["host"]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None
    if host != os.uname().nodename or pid == os.getpid():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    if _zombie(pid) or _ended(path):
        return None
    return pid


def _zombie(pid: int) -> bool:
    """A killed process nobody has reaped yet (a container's init may never reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]


def _ended(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.path.getsize(path) - 64 * 1024))
            tail = handle.read()
    except OSError:
        return False
    return b'"t":"end"' in tail.rsplit(b"\n", 2)[-2] if tail.count(b"\n") >= 2 else False
