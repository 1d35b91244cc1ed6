"""The bad-input pass of issue 21, kept: each failure it found is a case here.

Each test breaks the input the way the pass did (on a copy of the minitorch fixture)
and asserts what a CI owner needs: a one-line error and a non-zero exit, or an answer
that says what it could not read; never a traceback, and never a good index replaced by
a worse one without being asked. The table of cases is docs/reliability.md.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import random
import shutil
import sqlite3
import stat
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import anyio
import pytest

from indexer.build import build_index
from indexer.harness import builtin_manifest_dir
from indexer.query.freshness import Freshness, check_freshness
from indexer.query.index import Index
from indexer.select import impact
from indexer.select_changes import select_changes
from indexer.workspace import Workspace
from tests.helpers import commit_all, git
from tests.mcp_session import stdio_session, text_of
from tests.reliability_support import build, index_files, one_line_error, run, run_pytest

# A test file whose name is Latin-1, not UTF-8: b"caf\xe9".
BAD_TEST = os.fsdecode(b"test/test_caf\xe9.py")
BAD_SHOWN = "test/test_caf\\xe9.py"
BAD_TEST_TEXT = "def test_cafe():\n    assert True\n"
LINALG = "minitorch/linalg.py"
NEW_CPP = "aten/src/ATen/native/Generated.cpp"


# --- 1. file names that are not UTF-8 --------------------------------------------------


def add_bad_test(repo: Path) -> None:
    (repo / BAD_TEST).write_text(BAD_TEST_TEXT, encoding="utf-8")


def test_non_utf8_name_is_reported_by_build_update_select_and_status(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = minitorch_repo
    add_bad_test(repo)
    commit_all(repo, "a test file named in Latin-1")
    code, _, err = build(repo, capsys)
    assert code == 0, err
    assert f"not indexed: {BAD_SHOWN}: file name is not valid UTF-8" in err
    code, out, _ = run(capsys, "status", "--source", str(repo))
    assert code == 0 and f"{BAD_SHOWN}: file name is not valid UTF-8" in out
    (repo / LINALG).write_text((repo / LINALG).read_text() + "\nDEFAULT_ORD = 2\n")
    code, out, err = run(capsys, "index", "update", "--source", str(repo), "-q")
    assert code == 0, err
    commit_all(repo, "change linalg")
    code, out, err = run(capsys, "select", "--source", str(repo), "--base", "HEAD~2")
    assert code == 0, err
    assert BAD_SHOWN in out  # the test file changed: it runs, its name shown escaped
    code, out, err = run(capsys, "select", "--source", str(repo), "--base", "HEAD~2", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert BAD_SHOWN in [selected["path"] for selected in report["selected"]]
    assert BAD_SHOWN in [changed["path"] for changed in report["changed_files"]]


@pytest.mark.slow
def test_unchanged_non_utf8_test_file_is_kept_by_the_plugin(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pytest collects the file; the index could not hold it, so nothing says which code
    it tests: it runs, and the run ends normally (it ended in INTERNALERROR)."""
    repo = minitorch_repo
    add_bad_test(repo)
    commit_all(repo, "a test file named in Latin-1")
    git(repo, "branch", "base")
    assert build(repo, capsys)[0] == 0
    kernel = repo / "aten/src/ATen/native/cpu/BinaryOpsKernel.cpp"
    kernel.write_text(
        kernel.read_text().replace("      return a + alpha * b;", "      return alpha * b + a;")
    )
    commit_all(repo, "reorder the add kernel")
    result = run_pytest(repo, "--torchtalk-affected", "--torchtalk-base", "base", "-v")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "INTERNALERROR" not in result.stdout + result.stderr
    assert "test_cafe PASSED" in result.stdout
    assert "test/test_unrelated.py" not in result.stdout  # still a selection, not everything


def test_freshness_never_names_an_unindexable_file_raw(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The MCP server's stale note is built from this; a raw surrogate in it killed the
    server when the note was serialized."""
    repo = minitorch_repo
    assert build(repo, capsys)[0] == 0
    add_bad_test(repo)  # untracked, and no index can hold it
    workspace = Workspace.resolve(repo)
    index = Index(workspace.db_path)
    try:
        found = check_freshness(workspace, index)
    finally:
        index.close()
    assert found.fresh, ascii(found.describe())  # reported by the build, not a difference
    note = Freshness(stale=[BAD_TEST, LINALG]).describe()
    assert BAD_SHOWN in note
    note.encode("utf-8")  # what the MCP transport does


@pytest.mark.slow
def test_mcp_status_with_an_unindexable_file_in_the_tree(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp_server.state import ServerState
    from mcp_server.tools import Tools

    monkeypatch.setattr("mcp_server.state.WARM_IDLE_S", 0.1)
    monkeypatch.setattr("mcp_server.state.FRESHNESS_EVERY_S", 0.1)
    monkeypatch.setattr("mcp_server.state.FRESHNESS_IDLE_S", 0.1)
    repo = minitorch_repo
    add_bad_test(repo)
    assert build(repo, capsys)[0] == 0
    (repo / LINALG).write_text((repo / LINALG).read_text() + "\nDEFAULT_ORD = 2\n")
    state = ServerState(Workspace.resolve(repo))
    state.start()
    try:
        state.index()
        deadline = time.monotonic() + 30
        while state.stale_note() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        note = state.stale_note()
        assert note is not None and LINALG in note
        result = Tools(state).get_status()
        result.model_dump_json()  # serializes: the server's reply to the agent
        notes = result.structured_content["notes"]
        assert any(f"{BAD_SHOWN} (file name is not valid UTF-8" in note for note in notes)
    finally:
        state.stop()


# --- 2. selection cost is linear in a changed C++ file -----------------------------------


def chained(count: int, caller: str = "") -> str:
    body = ["namespace at { namespace native {", "int generated_0(int x) { return x; }"]
    body += [
        f"int generated_{i}(int x) {{ return generated_{i - 1}(x) + 1; }}" for i in range(1, count)
    ]
    return "\n".join([*body, caller, "}}", ""])


def walked_nodes(patch: pytest.MonkeyPatch) -> list[int]:
    """How many nodes each impact walk from now on reaches."""
    sizes: list[int] = []
    real = impact.ImpactWalker._walk

    def counting(self, *args, **kwargs):
        reach = real(self, *args, **kwargs)
        sizes.append(len(reach.steps))
        return reach

    patch.setattr(impact.ImpactWalker, "_walk", counting)
    return sizes


@pytest.mark.slow
@pytest.mark.parametrize("tested", [False, True], ids=["reached-by-nothing", "reached-by-tests"])
def test_new_cpp_file_selection_walks_linearly(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str], tested: bool
) -> None:
    """A new file of N functions, each calling the previous one (and, ``tested``, the
    last called from a tested kernel): the nodes walked grow with N, not N squared (one
    fallback walk per function, each over the rest of the chain: 1000 functions 181 s).
    The timing is bench/new_cpp_file.py's."""
    repo = minitorch_repo
    assert build(repo, capsys)[0] == 0
    workspace = Workspace.resolve(repo)
    kernel = repo / "aten/src/ATen/native/cpu/BinaryOpsKernel.cpp"
    original = kernel.read_text()
    walked: dict[int, int] = {}
    for count in (40, 80):
        if tested:  # the existing add kernel calls the last generated function
            kernel.write_text(
                original.replace(
                    "      return a + alpha * b;",
                    f"      return a + alpha * b + at::native::generated_{count - 1}(0);",
                )
            )
        (repo / NEW_CPP).write_text(chained(count))
        with pytest.MonkeyPatch.context() as patch:
            sizes = walked_nodes(patch)
            selection = select_changes(workspace, "HEAD")
        walked[count] = sum(sizes)
        assert (
            len([e for e in selection.entities if e.label.startswith("at::native::gen")]) == count
        )
        assert selection.run_everything is not tested, selection.everything[:2]
    assert walked[80] <= 2.5 * walked[40], walked


def test_innermost_each_is_innermost_for_every_line() -> None:
    from indexer.select.placement import innermost, innermost_each

    class Span:
        def __init__(self, line: int, end_line: int) -> None:
            self.line, self.end_line = line, end_line

    chance = random.Random(21)
    for _ in range(50):
        spans = []
        for _ in range(chance.randint(0, 30)):
            start = chance.randint(1, 200)
            spans.append(Span(start, start + chance.randint(0, 40)))
        lines = chance.sample(range(1, 260), 60)
        found = innermost_each(spans, lines)
        assert all(found[line] is innermost(spans, line) for line in lines)


# --- 3. unreadable directories --------------------------------------------------------------


def _unprivileged() -> list[str] | None:
    """A command prefix under which a mode-000 directory cannot be listed: none for an
    ordinary user; for root, setpriv without the capabilities that bypass permissions."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        return None
    prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]
    probe = subprocess.run([*prefix, "true"], capture_output=True, check=False)
    return prefix if probe.returncode == 0 else None


def torchtalk(repo: Path, *argv: str) -> subprocess.CompletedProcess:
    prefix = _unprivileged()
    if prefix is None:
        pytest.skip("running as root without setpriv: permissions cannot be denied")
    return subprocess.run(
        [*prefix, sys.executable, "-m", "pytest_torchtalk", *argv, "--source", str(repo)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
def locked_nn(minitorch_repo: Path, capsys: pytest.CaptureFixture[str]):
    """minitorch indexed, then its minitorch/nn package made unreadable."""
    assert build(minitorch_repo, capsys)[0] == 0
    locked = minitorch_repo / "minitorch/nn"
    locked.chmod(0)
    yield minitorch_repo
    locked.chmod(stat.S_IRWXU)


def test_unreadable_directory_keeps_the_good_index_unless_forced(locked_nn: Path) -> None:
    repo = locked_nn
    before = index_files(repo)
    assert any(path.startswith("minitorch/nn/") for path in before)
    for command in (["index", "build", "-q"], ["index", "update", "-q"]):
        result = torchtalk(repo, *command)
        assert result.returncode == 1, result.stderr
        assert one_line_error(result.stderr), result.stderr
        assert "minitorch/nn" in result.stderr and "--force" in result.stderr
        assert index_files(repo) == before
    result = torchtalk(repo, "index", "build", "-q", "--force")
    assert result.returncode == 0, result.stderr
    assert "minitorch/nn: directory unreadable" in result.stderr
    result = torchtalk(repo, "status")
    assert result.returncode == 0 and "minitorch/nn: directory unreadable" in result.stdout
    result = torchtalk(repo, "select", "--base", "HEAD")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


def test_select_with_an_unreadable_directory_is_an_answer(locked_nn: Path) -> None:
    (locked_nn / LINALG).write_text((locked_nn / LINALG).read_text() + "\nDEFAULT_ORD = 2\n")
    result = torchtalk(locked_nn, "select", "--base", "HEAD")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "run everything" in result.stdout and "could not be read" in result.stdout


# --- 4. crafted snapshot descriptions, and archive bombs ---------------------------------


@pytest.fixture
def exported(minitorch_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    assert build(minitorch_repo, capsys)[0] == 0
    assert run(capsys, "snapshot", "save", "good", "--source", str(minitorch_repo))[0] == 0
    archive = tmp_path / "good.tar.gz"
    assert run(capsys, "snapshot", "export", "good", "-o", str(archive))[0] == 0
    return archive


def rewritten(archive: Path, description: bytes, dest: Path) -> Path:
    """``archive`` with another snapshot.json, its checksums made to match."""
    with tarfile.open(archive, "r:gz") as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    files["snapshot.json"] = description
    files["SHA256SUMS"] = "".join(
        f"{hashlib.sha256(files[name]).hexdigest()}  {name}\n"
        for name in ("snapshot.json", "index.sqlite")
    ).encode()
    with tarfile.open(dest, "w:gz") as tar:
        for name in ("SHA256SUMS", "snapshot.json", "index.sqlite"):
            info = tarfile.TarInfo(name)
            info.size = len(files[name])
            tar.addfile(info, io.BytesIO(files[name]))
    return dest


def _description(archive: Path) -> dict:
    with tarfile.open(archive, "r:gz") as tar:
        return json.loads(tar.extractfile("snapshot.json").read())  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schema_version": "1"}, "schema_version must be int"),
        ({"created_at": 5}, "created_at must be str"),
        ({"created_at": "yesterday"}, "created_at must be an ISO 8601 time"),
        ({"counts": {"nodes": {"function": "many"}}}, "counts"),
        ({"counts": []}, "counts must be dict"),
        ({"db_bytes": -1}, "db_bytes must not be negative"),
        ({"git_commit": ["a"]}, "git_commit must be str or null"),
        ({"harness": None}, "harness must be str"),
    ],
)
def test_snapshot_description_of_the_wrong_types_is_refused(
    exported: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: dict,
    message: str,
) -> None:
    description = {**_description(exported), **change}
    bad = rewritten(exported, json.dumps(description).encode(), tmp_path / "bad.tar.gz")
    code, _, err = run(capsys, "snapshot", "import", str(bad), "--name", "bad")
    assert code == 1 and one_line_error(err), err
    assert message in err
    code, out, err = run(capsys, "snapshot", "list")
    assert code == 0 and "bad" not in out.split()


def test_snapshot_description_that_is_not_an_object_is_refused(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = rewritten(exported, b'["a", "list"]', tmp_path / "bad.tar.gz")
    code, _, err = run(capsys, "snapshot", "import", str(bad), "--name", "bad")
    assert code == 1 and one_line_error(err), err
    assert "a JSON object is expected, not list" in err


def test_index_member_may_not_inflate_past_its_archive(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A header claiming 300 MiB in a small archive (zeros inflate ~1000:1) is refused
    before anything is written; the limit was 64 GiB whatever the archive."""
    with tarfile.open(exported, "r:gz") as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    head = b""
    for name in ("SHA256SUMS", "snapshot.json"):
        info = tarfile.TarInfo(name)
        info.size = len(files[name])
        head += info.tobuf(tarfile.PAX_FORMAT) + files[name] + b"\0" * (-info.size % 512)
    bomb = tarfile.TarInfo("index.sqlite")
    bomb.size = 300 * 1024**2
    bad = tmp_path / "bomb.tar.gz"
    bad.write_bytes(gzip.compress(head + bomb.tobuf(tarfile.PAX_FORMAT) + b"\0" * 4096))
    code, _, err = run(capsys, "snapshot", "import", str(bad))
    assert code == 1 and one_line_error(err), err
    assert "is oversized" in err and "TORCHTALK_SNAPSHOT_MAX_BYTES" in err


# --- 5. harness names are names -----------------------------------------------------------


@pytest.fixture
def foreign_toml(tmp_path: Path) -> Path:
    """A TOML file elsewhere on the machine, with keys no manifest has."""
    path = tmp_path / "elsewhere" / "private.toml"
    path.parent.mkdir()
    path.write_text('[credentials]\nsecret_token = "abc"\n', encoding="utf-8")
    return path


def test_harness_option_is_a_name(
    minitorch_repo: Path, foreign_toml: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # What the option was joined to: the built-in manifests' directory.
    relative = os.path.relpath(foreign_toml.with_suffix(""), builtin_manifest_dir())
    code, _, err = run(capsys, "status", "--source", str(minitorch_repo), "--harness", relative)
    assert code == 2 and one_line_error(err), err
    assert "is not a harness name" in err and "credentials" not in err


def test_extends_is_a_name(
    minitorch_repo: Path, foreign_toml: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (minitorch_repo / ".torchtalk.toml").write_text(
        f'[harness]\nextends = "{foreign_toml.with_suffix("")}"\n', encoding="utf-8"
    )
    code, _, err = run(capsys, "status", "--source", str(minitorch_repo))
    assert code == 2 and one_line_error(err), err
    assert "[harness].extends" in err and "is not a harness name" in err
    assert "credentials" not in err and "secret" not in err


def test_harness_option_takes_a_manifest_path_given_as_one(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    own = minitorch_repo / ".torchtalk.toml"
    moved = minitorch_repo.parent / "minitorch-harness.toml"
    own.rename(moved)
    _code, out, err = run(
        capsys, "status", "--source", str(minitorch_repo), "--harness", str(moved), "--json"
    )
    assert json.loads(out)["manifests"][-1] == str(moved), err


# --- 6. numbers out of range ----------------------------------------------------------------


def test_negative_max_file_bytes_is_refused_and_the_index_kept(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = minitorch_repo
    assert build(repo, capsys)[0] == 0
    db_path = Workspace.resolve(repo).db_path
    before = index_files(repo)
    manifest = repo / ".torchtalk.toml"
    manifest.write_text(
        manifest.read_text().replace("[sources]\n", "[sources]\nmax_file_bytes = -5\n")
    )
    code, _, err = build(repo, capsys)
    assert code == 2 and one_line_error(err), err
    assert "[sources].max_file_bytes: must be at least 1 (got -5)" in err
    assert index_files(repo, db_path) == before


@pytest.mark.parametrize("jobs", ["0", "-3"])
@pytest.mark.parametrize("command", ["build", "update"])
def test_jobs_below_one_is_refused(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str], jobs: str, command: str
) -> None:
    code, _, err = run(capsys, "index", command, "--source", str(minitorch_repo), "--jobs", jobs)
    assert code == 2 and one_line_error(err), err
    assert f"--jobs must be at least 1 (got {jobs})" in err


# --- 7. outputs that cannot be written --------------------------------------------------------


def test_snapshot_export_to_an_unwritable_path(
    exported: Path, minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    under_a_file = minitorch_repo / "README.md" / "out.tar.gz"
    code, _, err = run(capsys, "snapshot", "export", "good", "-o", str(under_a_file))
    assert code == 1 and one_line_error(err), err
    assert "README.md is not a directory" in err


@pytest.mark.slow
@pytest.mark.parametrize("report", ["test", "README.md/report.json"], ids=["dir", "under-file"])
def test_plugin_report_path_that_cannot_be_written(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str], report: str
) -> None:
    assert build(minitorch_repo, capsys)[0] == 0
    result = run_pytest(minitorch_repo, "--torchtalk-affected", "--torchtalk-report", report)
    assert result.returncode == 4, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("ERROR: torchtalk: --torchtalk-report")
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.parametrize("command", [["index", "build", "-q"], ["status"], ["select"]])
def test_cache_dir_naming_a_file(
    minitorch_repo: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
) -> None:
    a_file = tmp_path / "cache-file"
    a_file.write_text("not a directory\n")
    monkeypatch.setenv("TORCHTALK_CACHE_DIR", str(a_file))
    code, _, err = run(capsys, *command, "--source", str(minitorch_repo))
    assert code == 2 and one_line_error(err), err
    assert f"TORCHTALK_CACHE_DIR={a_file} is not a directory" in err


# --- 8. MCP arguments of any size ----------------------------------------------------------------


@pytest.mark.slow
def test_mcp_huge_arguments_are_short_tool_errors(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert build(minitorch_repo, capsys)[0] == 0
    huge = "x" * 100_000
    calls = [
        ("affected", {"funcs": huge}),
        ("affected", {"funcs": ",".join(["add"] * 1000)}),
        ("affected", {"funcs": [huge]}),
        ("graph", {"func": huge}),
    ]

    async def scenario() -> list[tuple[bool, str]]:
        async with stdio_session(minitorch_repo) as client:
            outcomes = []
            for name, arguments in calls:
                result = await client.call_tool(name, arguments)
                outcomes.append((result.is_error, text_of(result)))
            status = await client.call_tool("get_status", {})
            assert not status.is_error
            return outcomes

    for (is_error, text), (name, _) in zip(anyio.run(scenario), calls, strict=True):
        assert is_error, (name, text[:200])
        assert len(text) < 1000 and "\n" not in text.strip(), (name, text[:300])
        assert "pattern too complex" not in text


# --- a damaged index: the same answer everywhere ---------------------------------------------


@pytest.fixture
def damaged(minitorch_repo: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    assert build(minitorch_repo, capsys)[0] == 0
    Workspace.resolve(minitorch_repo).db_path.write_bytes(b"not a database\n" * 100)
    (minitorch_repo / LINALG).write_text(
        (minitorch_repo / LINALG).read_text() + "\nDEFAULT_ORD = 2\n"
    )
    return minitorch_repo


@pytest.mark.slow
def test_damaged_index_runs_everything_in_select_and_the_plugin(
    damaged: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Like a missing index (docs/reliability.md): everything runs, saying why; status
    is where it is an error."""
    code, out, err = run(capsys, "select", "--source", str(damaged), "--base", "HEAD")
    assert code == 0, err
    assert "run everything: the index cannot be used" in out
    assert "torchtalk index build" in out
    result = run_pytest(damaged, "--torchtalk-affected", "--torchtalk-base", "HEAD")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "running everything: the index cannot be used" in result.stdout
    code, _, err = run(capsys, "status", "--source", str(damaged))
    assert code == 1 and one_line_error(err) and "is not a TorchTalk index" in err


@pytest.mark.slow
def test_damaged_index_is_rebuilt_by_the_mcp_server(damaged: Path) -> None:
    from mcp_server.state import ServerState

    state = ServerState(Workspace.resolve(damaged))
    state.start()
    try:
        assert state.wait_until_idle(120)
        phases = [phase["step"] for phase in state.snapshot()["phases"]]
        assert any("the index cannot be read" in step for step in phases), phases
        assert state.readiness()["cpp"] == "ready"
        assert state.index().meta.get("files")
    finally:
        state.stop()


# --- renames reach the disk -------------------------------------------------------------------------


def test_build_syncs_the_index_directory_after_the_rename(
    minitorch_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real = os.fsync

    def recording(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    result = build_index(Workspace.resolve(minitorch_repo), show_progress=False)
    assert str(result.db_path.parent) in synced


def test_a_sqlite_error_deep_in_the_index_is_no_traceback(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An index whose header reads but whose tables are gone: the selection runs
    everything naming the damage."""
    assert build(minitorch_repo, capsys)[0] == 0
    db_path = Workspace.resolve(minitorch_repo).db_path
    conn = sqlite3.connect(db_path)
    conn.execute("DROP TABLE edges")
    conn.commit()
    conn.close()
    (minitorch_repo / LINALG).write_text(
        (minitorch_repo / LINALG).read_text() + "\nDEFAULT_ORD = 2\n"
    )
    code, out, err = run(capsys, "select", "--source", str(minitorch_repo), "--base", "HEAD")
    assert code == 0, err
    assert "run everything: " in out and "no such table: edges" in out
