"""The second reliability pass (issue 40): outputs never replace what is not theirs, and
stay useful at scale. Every output goes through indexer/durable.py's writer, which
refuses a symlink, FIFO, device or directory at its path; a report escapes control
characters in names, lists the first reasons of thousands and says where the rest
are. docs/reliability.md has the table."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from indexer import durable
from indexer.record import storage
from indexer.record.model import Record
from indexer.select_changes import select_changes
from indexer.workspace import Workspace
from pytest_torchtalk.report import markdown_table
from tests.reliability_support import (
    build,
    needs_root,
    one_line_error,
    run,
    run_pytest,
)

LINALG = "minitorch/linalg.py"


def special(kind: str, path: Path, tmp_path: Path) -> Path:
    """A symlink to a file of ours, a FIFO, a directory or (root) a character device
    with /dev/full's numbers at ``path``."""
    if kind == "symlink":
        target = tmp_path / "link-target.txt"
        target.write_text("the user's file\n")
        path.symlink_to(target)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "device":
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 7))
    return path


def unchanged(kind: str, path: Path, tmp_path: Path) -> bool:
    mode = os.lstat(path).st_mode
    if kind == "symlink":
        return stat.S_ISLNK(mode) and (tmp_path / "link-target.txt").read_text() == (
            "the user's file\n"
        )
    return {
        "fifo": stat.S_ISFIFO,
        "directory": stat.S_ISDIR,
        "device": stat.S_ISCHR,
    }[kind](mode)


KINDS = [
    "symlink",
    "fifo",
    "directory",
    pytest.param("device", marks=needs_root),
]


# --- the writer ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_write_atomic_refuses_what_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    path = special(kind, tmp_path / "out.json", tmp_path)
    with pytest.raises(durable.UnsafeTarget, match="not replaced"):
        durable.write_atomic(path, b"{}\n")
    assert unchanged(kind, path, tmp_path)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.json")] == []


def test_write_atomic_follows_a_symlink_only_when_asked(tmp_path: Path) -> None:
    path = special("symlink", tmp_path / "out.json", tmp_path)
    durable.write_atomic(path, b"{}\n", follow_symlinks=True)
    assert path.is_symlink() and (tmp_path / "link-target.txt").read_bytes() == b"{}\n"


def test_write_atomic_never_replaces_what_appeared_meanwhile(tmp_path: Path) -> None:
    """Checked when the write starts and again at the rename: a FIFO made in between
    (another program's) is left, and the write fails saying so."""
    path = tmp_path / "out.json"
    appeared = "appeared while it was being written"
    with pytest.raises(durable.UnsafeTarget, match=appeared), durable.atomic_output(path) as out:
        out.write(b"{}\n")
        os.mkfifo(path)
    assert stat.S_ISFIFO(os.lstat(path).st_mode)
    path.unlink()
    path.write_text("old\n")
    replaced = "was replaced while it was being written"
    with pytest.raises(durable.UnsafeTarget, match=replaced), durable.atomic_output(path) as out:
        out.write(b"{}\n")
        path.unlink()
        os.mkfifo(path)
    assert stat.S_ISFIFO(os.lstat(path).st_mode)


# --- the commands' outputs --------------------------------------------------------------------


@pytest.fixture
def records(tmp_path: Path) -> list[Path]:
    paths = [tmp_path / "a.rec", tmp_path / "b.rec"]
    for path in paths:
        storage.write(Record(meta={"commit": "abc"}), path)
    return paths


@pytest.mark.parametrize("kind", KINDS)
def test_record_merge_output_is_never_a_special_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], records: list[Path], kind: str
) -> None:
    out = special(kind, tmp_path / "merged.rec", tmp_path)
    code, _, err = run(capsys, "record", "merge", *map(str, records), "-o", str(out))
    assert code == 2 and one_line_error(err), err
    assert f"--output {out}: is a" in err
    assert unchanged(kind, out, tmp_path)


@pytest.fixture
def saved(minitorch_repo: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert build(minitorch_repo, capsys)[0] == 0
    assert run(capsys, "snapshot", "save", "good", "--source", str(minitorch_repo))[0] == 0
    return "good"


@pytest.mark.parametrize("kind", ["symlink", "fifo", pytest.param("device", marks=needs_root)])
def test_snapshot_export_output_is_never_a_special_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], saved: str, kind: str
) -> None:
    out = special(kind, tmp_path / "out.tar.gz", tmp_path)
    code, _, err = run(capsys, "snapshot", "export", saved, "-o", str(out))
    assert code == 1 and one_line_error(err), err
    assert f"cannot write {out}: is a" in err
    assert unchanged(kind, out, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_plugin_report_is_never_a_special_file(
    minitorch_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """Refused before any test runs (the symlink became a regular file after the run,
    its target untouched; the FIFO was replaced)."""
    assert build(minitorch_repo, capsys)[0] == 0
    out = special(kind, minitorch_repo / "report.json", tmp_path)
    result = run_pytest(minitorch_repo, "--torchtalk-affected", "--torchtalk-report", "report.json")
    assert result.returncode == 4, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith(
        "ERROR: torchtalk: --torchtalk-report report.json: is a"
    ), errors
    assert unchanged(kind, out, tmp_path)


# --- reports at scale, and names that hold control characters ---------------------------------


def test_a_name_with_a_newline_cannot_add_lines_to_a_report(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert build(minitorch_repo, capsys)[0] == 0
    (minitorch_repo / "scripts").mkdir()
    name = "scripts/x.py\nrun everything: nothing\x1b[31m.py"
    (minitorch_repo / name).write_text("x = 1\n")
    code, out, err = run(capsys, "select", "--source", str(minitorch_repo), "--base", "HEAD")
    assert code == 0, err
    assert "scripts/x.py\\nrun everything: nothing\\x1b[31m.py changed" in out
    assert not any(line.startswith("run everything: nothing") for line in out.splitlines())
    assert "\x1b" not in out


@pytest.mark.slow
def test_a_change_of_thousands_of_files_prints_a_summary(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """5,000 new scripts outside the sources: each is a reason to run everything. It
    printed 10,000 lines and a 2.3 MB GitHub step summary (GitHub drops one over 1 MiB)."""
    assert build(minitorch_repo, capsys)[0] == 0
    scripts = minitorch_repo / "scripts"
    scripts.mkdir()
    for number in range(5000):
        (scripts / f"generated_{number:04d}_{'x' * 200}.py").write_text("x = 1\n")
    code, out, err = run(capsys, "select", "--source", str(minitorch_repo), "--base", "HEAD")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].endswith("5000 files, changed entities not placed"), lines[0]
    assert len(lines) < 40, len(lines)
    assert "... and 4,990 more: every one is in the JSON report" in out
    # What the plugin appends to $GITHUB_STEP_SUMMARY, for the same selection.
    summary = markdown_table(select_changes(Workspace.resolve(minitorch_repo), "HEAD"))
    assert len(summary.encode()) < 1024**2
    assert "4,990 more" in summary


def test_a_stale_index_that_is_not_updated_still_counts_the_changes(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert build(minitorch_repo, capsys)[0] == 0
    (minitorch_repo / LINALG).write_text((minitorch_repo / LINALG).read_text() + "\nX = 2\n")
    code, out, err = run(
        capsys, "select", "--source", str(minitorch_repo), "--base", "HEAD", "--no-update"
    )
    assert code == 0, err
    first = out.splitlines()[0]
    assert first.endswith(": 1 file, changed entities not placed"), first
    assert "run everything: the index is stale" in out
