"""A recorded run: what each test really executed, as data of the index.

What a test executes is kept by *segment*, a unit of work done once: a test's own
setup, call and teardown; a class-, module- or session-scoped fixture's setup (done once,
used by many tests); a test file's collection (its imports); the session's start. A test
lists the segments it depends on, so the work of a shared fixture is recorded once and
still counts for every test that used it.

A module's *import work* (what its body ran: the modules it imported, the functions and
ops it called) is a segment of its own too, of kind ``module``, linked to no test: a test
depends on the import work of every module its file, its fixtures or its own code import,
transitively (``RecordedRuns.importers``), whichever of them happened to be imported
first in the process that recorded it.

A segment holds *names*, each a (kind, text) pair interned once per record:

==========  ==========================================================================
kind        text
==========  ==========================================================================
op          a dispatcher operator with its overload: ``aten::mm``, ``aten::add.Tensor``
backward    an autograd node its backward pass ran: ``MmBackward0``
function    a Python function of the tree: ``torch/nn/functional.py:linear``
module      a module of the tree whose body ran (it was imported): ``torch/nn/functional.py``
binding     a compiled function called from Python that is not an op: ``torch._C._nn.foo``
kernel      a CUDA kernel it launched (recorded only where a GPU is present)
device      a device type whose memory it allocated, or whose kernels it launched: ``cpu``,
            ``cuda`` (how each is seen: the record's ``mechanisms["devices"]``)
==========  ==========================================================================
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

KINDS = ("op", "backward", "function", "module", "binding", "kernel", "device")  # by position
SEGMENT_KINDS = ("test", "fixture", "file", "session", "module")  # stored by position
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
# Outcomes whose record shows everything the test does: a test that failed or was skipped
# stopped early, so what it did not reach is unknown.
COMPLETE_OUTCOMES = frozenset({"passed", "xpassed"})
# How a test stopped before its end begins its unrecorded reason ('interrupted: SIGTERM').
INTERRUPTED = "interrupted: "


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _optional_text(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _texts(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _text_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(item, str) for item in value.values())


_OBJECT_NAME = re.compile(r"[0-9a-fA-F]{1,64}")


def _commit(value: Any) -> bool:
    # Handed to git as a revision: hexadecimal only, so that it is never read as an option.
    return value is None or (isinstance(value, str) and _OBJECT_NAME.fullmatch(value) is not None)


def _moment(value: Any) -> bool:
    # Subtracted from the time now, which knows its zone: one without a zone cannot be.
    if value == "":
        return True  # a merge of records that did not say
    try:
        return isinstance(value, str) and datetime.fromisoformat(value).tzinfo is not None
    except ValueError:
        return False


def _parts(value: Any) -> bool:
    return type(value) is int and value >= 1


def _flag(value: Any) -> bool:
    return isinstance(value, bool)


def _dirty(value: Any) -> bool:
    # repo path -> content hash (None: deleted); null where git could not say
    return value is None or (
        isinstance(value, dict)
        and all(item is None or isinstance(item, str) for item in value.values())
    )


def _object(value: Any) -> bool:
    return isinstance(value, dict)


# What each key of Record.meta holds: (check, what it must be). A record comes from
# elsewhere (a CI artifact, a snapshot), so its meta is checked against this when read
# (``indexer.record.storage``); a key not listed here is kept but read by nothing.
META_KEYS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "commit": (_commit, "a hexadecimal commit or null"),
    "commits": (_texts, "a list of strings"),
    "started_at": (_moment, "a time with its zone (ISO 8601)"),
    "created_at": (_moment, "a time with its zone (ISO 8601)"),
    "harness": (_optional_text, "a string or null"),
    "python": (_optional_text, "a string or null"),
    "torch": (_optional_text, "a string or null"),
    "devices": (_texts, "a list of strings"),
    "devices_in_every_part": (_texts, "a list of strings"),
    "mechanisms": (_text_map, "an object of strings"),
    "parts": (_parts, "a whole number from 1"),
    "problems": (_texts, "a list of strings"),
    "unobserved_ops": (_texts, "a list of strings"),
    # Keys the parallel work of issue 36 writes (a stopped run, a dirty tree, the
    # selecting environment): their readers own their insides, these their shape.
    "partial": (_flag, "true or false"),
    "partial_reasons": (_texts, "a list of strings"),
    "dirty": (_dirty, "an object of strings or nulls, or null"),
    "environment": (_object, "an object"),
}


def meta_problem(meta: Any) -> str | None:
    """What is wrong with a record's ``meta`` read from a file, in a few words; None
    when every key holds what :data:`META_KEYS` says."""
    if not isinstance(meta, dict):
        return "its meta is not an object"
    for key, (check, what) in META_KEYS.items():
        if key in meta and not check(meta[key]):
            return f"its meta {key!r} is not {what}"
    return None


class Segment:
    """A unit of work and the names it executed (ids into ``Record.names``).

    Segments that executed the same names may share one (frozen) set: a record read from
    disk or merged keeps one per work set (``indexer.record.storage``), so assign a new
    set rather than change a shared one in place.
    """

    __slots__ = ("kind", "label", "names")

    def __init__(self, kind: str, label: str, names: set[int] | None = None) -> None:
        self.kind = kind  # one of SEGMENT_KINDS
        self.label = label  # node id, 'fixture NAME @ BASEID', 'file PATH', 'session', module PATH
        self.names: set[int] = set() if names is None else names

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Segment):
            return NotImplemented
        return (self.kind, self.label, self.names) == (other.kind, other.label, other.names)

    def __repr__(self) -> str:
        return f"Segment({self.kind!r}, {self.label!r})"


@dataclass
class RecordedTest:
    nodeid: str
    file: str  # repo-relative path of the test file
    outcome: str  # one of OUTCOMES
    duration: float  # seconds: setup, call and teardown
    segments: list[int] = field(default_factory=list)  # ids into Record.segments
    unrecorded: str = ""  # why what it executed is not (fully) known; '' when it is

    @property
    def complete(self) -> bool:
        """Whether the record holds everything this test executes."""
        return not self.unrecorded and self.outcome in COMPLETE_OUTCOMES


@dataclass
class Record:
    meta: dict  # commit, created_at, torch/python versions, devices, mechanisms...
    names: list[tuple[str, str]] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    tests: list[RecordedTest] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # repo path -> content hash
    _ids: dict[tuple[str, str], int] = field(default_factory=dict, repr=False, compare=False)

    def name_id(self, kind: str, text: str) -> int:
        """The id of (kind, text), interned on first use."""
        key = (kind, text)
        found = self._ids.get(key)
        if found is None and len(self._ids) != len(self.names):  # names set from outside
            self._ids = {name: index for index, name in enumerate(self.names)}
            found = self._ids.get(key)
        if found is None:
            found = len(self.names)
            self.names.append(key)
            self._ids[key] = found
        return found

    def add_segment(self, kind: str, label: str) -> int:
        self.segments.append(Segment(kind, label))
        return len(self.segments) - 1

    def names_of(self, test: RecordedTest) -> set[int]:
        """Every name the test executed, through all its segments."""
        names: set[int] = set()
        for segment in test.segments:
            names |= self.segments[segment].names
        return names

    def nodeids_seen_whole(self) -> list[str]:
        """The node ids of the tests whose work the record saw whole (no unrecorded
        reason): what a completion run leaves out (docs/recording.md#completing-a-record)."""
        return [test.nodeid for test in self.tests if not test.unrecorded]

    @property
    def commit(self) -> str | None:
        return self.meta.get("commit")
