"""Hostile and damaged records are refused in one line by every reader (issue 36).

A record comes from elsewhere (a CI artifact, a snapshot archive). Each record here is
written wrong on purpose with every checksum right, recomputed the way the writer computes
them (docs/recording.md, "A record from elsewhere"), so what refuses it is the check of what
it holds: the meta's types, array lengths against the file's size, the header's depth. The
readers are the real ones: the CLI, a pytest run of the fixture suite, the MCP tools, and
`snapshot import`; the index is built from the minitorch fixture.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sqlite3
import subprocess
import sys
import tarfile
import zlib
from array import array
from datetime import datetime, timezone
from pathlib import Path

import pytest

from indexer.locations import cache_dir
from indexer.query.recorded import record_path_for
from indexer.record import storage
from indexer.record.model import Record, RecordedTest
from indexer.workspace import Workspace
from tests.helpers import git
from tests.reliability_support import one_line_error, run

BINARY_OPS = "aten/src/ATen/native/BinaryOps.cpp"
TEST_FILE = "test/test_binary_ufuncs.py"
DEEP = 100_000
HUGE = 2**62
TOO_DEEP = "nests deeper than 16 levels"
# Files older snapshots carried beside their index (derived data now lives inside it).
HUB, JUDGMENTS = "index.sqlite.hub", "index.sqlite.judgments"
# Each hostile record: (what it changes, the words of its refusal).
CASES = {
    "mechanisms-a-list": ({"mechanisms": ["ops", "python"]}, "'mechanisms' is not an object"),
    "devices-a-string": ({"devices": "cuda"}, "'devices' is not a list of strings"),
    "commit-a-number": ({"commit": 12345}, "'commit' is not a hexadecimal commit"),
    "commit-an-option": ({"commit": "--output=clobbered"}, "'commit' is not a hexadecimal"),
    "huge-array": ("huge", "truncated"),
    "posting-past-the-work-sets": ("posting", "a posting names a work set that does not exist"),
    "deep-header": ("deep", TOO_DEEP),
}


# --- writing a record wrong, with its checksums right ------------------------------------


def header_digest(fields_text: str) -> str:
    """The header's checksum as the writer makes it: BLAKE2b-128 of the sorted, compact
    JSON of format, meta, reasons and counts."""
    return hashlib.blake2b(fields_text.encode(), digest_size=16).hexdigest()


BLOCK = 1 << 16


def block_checksums(sections: dict[str, bytes]) -> bytes:
    """The table of checksums as the writer makes it: the CRC-32 of each 64 KiB block of
    each section after the table, in order, as native 32-bit integers."""
    table = array("I")
    for name, data in sections.items():
        if name != "block_crc32":
            table.extend(zlib.crc32(data[at : at + BLOCK]) for at in range(0, len(data), BLOCK))
    return table.tobytes()


def split(path: Path) -> tuple[dict, dict[str, bytes]]:
    """(header, section name -> its bytes) of the record at ``path``."""
    data = path.read_bytes()
    assert data.startswith(storage.MAGIC)
    line, body = data[len(storage.MAGIC) :].split(b"\n", 1)
    header = json.loads(line)
    sections, at = {}, 0
    for name, code, length in header["sections"]:
        sections[name] = body[at : at + length * array(code).itemsize]
        at += len(sections[name])
    assert at == len(body)
    return header, sections


def rewrite(
    path: Path, header: dict, sections: dict[str, bytes], deep_in_meta: str = "", huge: str = ""
) -> None:
    """``header`` and ``sections`` with every checksum right; ``deep_in_meta``: a meta key
    whose value is a list nested DEEP levels (spliced in as text: no JSON library writes
    one); ``huge``: a section whose length the header says is HUGE."""
    mark = "@deep@"
    if deep_in_meta:
        header["meta"][deep_in_meta] = mark
    deep = "[" * DEEP + "]" * DEEP
    sections["block_crc32"] = table = block_checksums(sections)
    header["table_crc32"] = zlib.crc32(table)
    header["sections"] = [
        [name, code, HUGE if name == huge else len(sections[name]) // array(code).itemsize]
        for name, code, _ in header["sections"]
    ]
    fields = {k: header[k] for k in ("format", "meta", "reasons", "counts")}
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    header["header_digest"] = header_digest(text.replace(f'"{mark}"', deep))
    line = json.dumps(header).replace(f'"{mark}"', deep)
    body = b"".join(sections[name] for name, _, _ in header["sections"])
    path.write_bytes(storage.MAGIC + line.encode() + b"\n" + body)


def make_hostile(path: Path, case: str) -> str:
    """Rewrite the record at ``path`` as ``case`` of CASES; the words its refusal says."""
    change, words = CASES[case]
    header, sections = split(path)
    if change == "huge":
        rewrite(path, header, sections, huge="test_durations")
    elif change == "deep":
        rewrite(path, header, sections, deep_in_meta="problems")
    elif change == "posting":  # the last posting names one work set past the last
        past = header["counts"]["worksets"].to_bytes(4, sys.byteorder)
        sections["posting_worksets"] = sections["posting_worksets"][:-4] + past
        rewrite(path, header, sections)
    else:
        header["meta"].update(change)
        rewrite(path, header, sections)
    return words


def a_record(commit: str) -> Record:
    """What a run of two tests of the fixture's binary ops recorded."""
    record = Record(
        meta={
            "commit": commit,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "harness": "pytorch",
            "devices": ["cpu"],
            "mechanisms": {"devices": "allocations seen by a CPU allocator"},
            "parts": 1,
            "problems": [],
        }
    )
    for name in ("test_add_operator_cpu", "test_add_alpha_cpu_float32"):
        nodeid = f"{TEST_FILE}::TestBinaryUfuncsCPU::{name}"
        segment = record.add_segment("test", nodeid)
        record.segments[segment].names = {record.name_id("op", "aten::add.Tensor")}
        record.tests.append(RecordedTest(nodeid, TEST_FILE, "passed", 0.1, [segment]))
    return record


@pytest.fixture
def indexed(minitorch_repo: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """The minitorch fixture, indexed, a good record of its commit beside the index, and a
    change to the add kernel's code (so a selection asks the record)."""
    repo = minitorch_repo
    assert run(capsys, "index", "build", "--source", str(repo), "-q")[0] == 0
    storage.write(a_record(git(repo, "rev-parse", "HEAD").strip()), record_of(repo))
    kernel = repo / BINARY_OPS
    old = "alpha_check(iter.common_dtype(), alpha);"
    assert old in kernel.read_text()
    kernel.write_text(kernel.read_text().replace(old, "alpha_check(iter.common_dtype(), -alpha);"))
    # Rewritten the way the cases are, with a meta that holds what it should, it reads:
    # the cases are refused for what they hold, not for a checksum.
    header, sections = split(record_of(repo))
    header["meta"]["torch"] = "2.6.0"
    rewrite(record_of(repo), header, sections)
    assert storage.read(record_of(repo)).meta["torch"] == "2.6.0"
    return repo


def record_of(repo: Path) -> Path:
    return record_path_for(Workspace.resolve(repo).db_path)


# --- every reader -----------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_cli_refuses_a_hostile_record_in_one_line(
    case: str, indexed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo, path = indexed, record_of(indexed)
    good = tmp_path / "good.ttr"
    good.write_bytes(path.read_bytes())
    words = make_hostile(path, case)
    for argv in (
        ("record", "stats", "--record", str(path)),
        ("record", "show", "--record", str(path), "--op", "aten::add.Tensor"),
        ("record", "stats", "--source", str(repo)),
    ):
        code, out, err = run(capsys, *argv)
        assert code == 1 and one_line_error(err), (argv, out, err)
        assert words in err and "cannot be used" in err, err
    merged = tmp_path / "merged.ttr"
    code, _, err = run(capsys, "record", "merge", str(good), str(path), "-o", str(merged))
    assert code == 1 and one_line_error(err) and words in err, err
    assert not merged.exists()

    # status and select describe the index and choose tests: the record is one line of
    # theirs, saying why it is not used, and the static walk chooses.
    code, out, err = run(capsys, "status", "--source", str(repo))
    assert code == 0 and not err, err
    assert [line for line in out.splitlines() if words in line] == [
        line for line in out.splitlines() if line.startswith("record:")
    ]
    assert "record:   unusable: record" in out
    code, out, err = run(capsys, "select", "--source", str(repo), "--base", "HEAD")
    assert code == 0, err
    refusal = [line for line in out.splitlines() if line.startswith("record: not used:")]
    assert len(refusal) == 1 and words in refusal[0], out
    assert TEST_FILE in out  # selected by the static walk
    assert not (repo / "clobbered").exists()


@pytest.mark.parametrize("case", ["commit-a-number", "devices-a-string", "deep-header"])
def test_pytest_runs_with_the_hostile_record_refused(case: str, indexed: Path) -> None:
    words = make_hostile(record_of(indexed), case)
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--torchtalk-affected",
         "--torchtalk-base", "HEAD", TEST_FILE],
        cwd=indexed, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "INTERNALERROR" not in output, output
    refusal = [line for line in output.splitlines() if line.startswith("record: not used:")]
    assert len(refusal) == 1 and words in refusal[0], output
    assert "passed" in output.splitlines()[-1]


@pytest.mark.parametrize("case", ["commit-a-number", "mechanisms-a-list", "huge-array"])
def test_the_mcp_tools_say_the_record_cannot_be_used(case: str, indexed: Path) -> None:
    from mcp_server.state import ServerState
    from mcp_server.tools import Tools

    words = make_hostile(record_of(indexed), case)
    state = ServerState(Workspace.resolve(indexed))
    state.start()
    try:
        assert state.wait_until_idle(120)
        tools = Tools(state)
        status = tools.get_status()
        assert not status.is_error
        record = status.structured_content["data"]["record"]
        assert words in record["error"] and "\n" not in record["error"]
        answer = tools.affected(["aten::add.Tensor"])
        assert not answer.is_error
        notes = [n for n in answer.structured_content["notes"] if "record" in n]
        assert len(notes) == 1 and "cannot be used" in notes[0] and words in notes[0], notes
    finally:
        state.stop()


# --- a snapshot that carries one ----------------------------------------------------------


def archive_members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive, "r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]


def write_archive(path: Path, files: dict[str, bytes]) -> Path:
    """An archive of ``files`` whose SHA256SUMS lists each, right."""
    files = dict(files)
    files["SHA256SUMS"] = "".join(
        f"{hashlib.sha256(data).hexdigest()}  {name}\n"
        for name, data in files.items()
        if name != "SHA256SUMS"
    ).encode()
    with tarfile.open(path, "w:gz") as tar:
        for name in ["SHA256SUMS", *sorted(set(files) - {"SHA256SUMS"})]:
            info = tarfile.TarInfo(name)
            info.size = len(files[name])
            tar.addfile(info, io.BytesIO(files[name]))
    return path


@pytest.fixture
def exported(indexed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A snapshot of the indexed fixture with its good record (and what its build derived,
    inside the index), exported; the store emptied after, as on another machine."""
    assert run(capsys, "select", "--source", str(indexed), "--base", "HEAD")[0] == 0
    assert run(capsys, "snapshot", "save", "nightly", "--source", str(indexed))[0] == 0
    archive = tmp_path / "nightly.tar.gz"
    assert run(capsys, "snapshot", "export", "nightly", "-o", str(archive))[0] == 0
    assert run(capsys, "snapshot", "delete", "nightly")[0] == 0
    files = archive_members(archive)
    assert set(files) == {"SHA256SUMS", "snapshot.json", "index.sqlite", "record.ttr"}
    # Written again as the cases are, untouched, it imports.
    again = write_archive(tmp_path / "again.tar.gz", files)
    assert run(capsys, "snapshot", "import", str(again))[0] == 0
    assert run(capsys, "snapshot", "delete", "nightly")[0] == 0
    return archive


def refused_import(archive: Path, capsys: pytest.CaptureFixture[str]) -> str:
    code, _, err = run(capsys, "snapshot", "import", str(archive))
    assert code == 1 and one_line_error(err), err
    assert not list((cache_dir() / "snapshots").rglob("snapshot.json")), "installed"
    return err


@pytest.mark.parametrize("case", ["devices-a-string", "huge-array", "deep-header"])
def test_a_snapshot_carrying_a_hostile_record_does_not_import(
    case: str, exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = archive_members(exported)
    record = tmp_path / "record.ttr"
    record.write_bytes(files["record.ttr"])
    words = make_hostile(record, case)
    files["record.ttr"] = record.read_bytes()
    err = refused_import(write_archive(tmp_path / "hostile.tar.gz", files), capsys)
    assert words in err and "cannot be used" in err


@pytest.mark.parametrize("member", [HUB, JUDGMENTS])
def test_an_older_snapshots_sidecar_is_dropped_on_import(
    member: str, exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An archive made before derived data moved into the index may hold its old files:
    whatever they hold (nested past any header we wrote), they are never installed."""
    files = archive_members(exported)
    files[member] = ('{"answers": ' + "[" * DEEP + "]" * DEEP + "}").encode()
    code, _, err = run(
        capsys, "snapshot", "import", str(write_archive(tmp_path / "old.tar.gz", files))
    )
    assert code == 0, err
    installed = {path.name for path in (cache_dir() / "snapshots").rglob("*") if path.is_file()}
    assert member not in installed and "index.sqlite" in installed


# --- derived data inside the index ---------------------------------------------------------


@pytest.mark.parametrize("change", ["partial", "deep"])
def test_a_hostile_hub_walk_in_the_index_is_walked_again(
    change: str, indexed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It holds the key of this very index: only its shape can refuse it."""
    from contextlib import closing

    from indexer.query.index import Index
    from indexer.select import hub

    db_path = Workspace.resolve(indexed).db_path
    with closing(sqlite3.connect(db_path)) as conn, conn:
        if change == "partial":  # not whole values
            conn.execute(
                "UPDATE derived_arrays SET data = substr(data, 2) WHERE name = 'hub' AND array = 'node'"
            )
        else:
            deep = "[" * DEEP + "]" * DEEP
            conn.execute(
                "UPDATE derived SET header = ? WHERE name = 'hub'", (f'{{"hub": {deep}}}',)
            )
    with closing(Index(db_path)) as index:
        assert hub.load(index) is None
    code, out, err = run(capsys, "select", "--source", str(indexed), "--base", "HEAD", "--json")
    assert code == 0, err
    walk = json.loads(out)["index"].get("hub_walk")
    assert walk is None or "no walk was kept" in walk
