"""The second reliability pass (issue 40), the audit's part: a resume never overwrites an
edit, every command it runs ends within its limits, a baseline where nothing passes
stops. On the auditext fixture with ``--build true`` (its Python is what is mutated, so
no compiler is needed); docs/reliability.md has the table."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from indexer.audit.journal import EditedSinceMutation, Journal
from indexer.audit.run import STATE_DIR
from tests.helpers import git, make_fixture_repo
from tests.reliability_support import build, one_line_error, run
from tests.test_audit import BUILD, needs_compiler

TEST = f"{sys.executable} -m pytest tests -q -p no:cacheprovider"
TEXT = "auditext/text.py"


@pytest.fixture
def auditext(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    repo = make_fixture_repo("auditext", tmp_path / "auditext")
    assert build(repo, capsys)[0] == 0  # so the audit's clock starts with an index
    return repo


@pytest.fixture
def built_auditext(auditext: Path) -> Path:
    """auditext with its extension built in place (ignored by git), so that its suite
    passes and the audit's own build can be ``true``."""
    (auditext / ".git" / "info" / "exclude").write_text("build/\n*.so\n*.egg-info/\n")
    subprocess.run(BUILD, shell=True, cwd=auditext, check=True, capture_output=True)
    assert git(auditext, "status", "--porcelain") == ""
    return auditext


def audit(capsys, repo: Path, test: str, *extra: str) -> tuple[int, str, str]:
    args = ["--build", "true", "--test", test, "--paths", TEXT, "--baseline-runs", "1"]
    return run(capsys, "audit", "--source", str(repo), *args, *extra)


def test_journal_restores_only_the_bytes_it_wrote(tmp_path: Path) -> None:
    source = tmp_path / "tree"
    source.mkdir()
    (source / "a.py").write_bytes(b"x = 1\n")
    state = tmp_path / "state"
    Journal(state, source).change("a.py", b"x = 2\n", "m001")  # then the audit is killed
    (source / "a.py").write_bytes(b"x = 2\ny = 'the user'\n")  # an edit meanwhile
    with pytest.raises(EditedSinceMutation, match=r"a\.py changed since the audit mutated it"):
        Journal(state, source).restore_all()
    assert (source / "a.py").read_bytes() == b"x = 2\ny = 'the user'\n"
    saved = [p for p in state.iterdir() if p.name.startswith("original-")]
    assert [p.read_bytes() for p in saved] == [b"x = 1\n"]  # both versions are kept
    assert len(Journal(state, source).pending()) == 1


def test_journal_drops_an_entry_whose_mutation_never_landed(tmp_path: Path) -> None:
    """Killed between the journal and the write: the file is still the original."""
    source = tmp_path / "tree"
    source.mkdir()
    (source / "a.py").write_bytes(b"x = 1\n")
    journal = Journal(tmp_path / "state", source)
    journal.change("a.py", b"x = 2\n", "m001")
    (source / "a.py").write_bytes(b"x = 1\n")
    assert [e.path for e in Journal(tmp_path / "state", source).restore_all()] == ["a.py"]
    assert journal.pending() == []


def test_resume_stops_naming_a_file_edited_after_a_kill(
    auditext: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a kill -9 leaves (a journaled mutation), then an edit; the resume restored the
    original over the edit and went on (exit 0)."""
    state = auditext / ".git" / STATE_DIR
    target = auditext / TEXT
    original = target.read_bytes()
    mutated = original.replace(b"total + 1", b"total - 1")
    Journal(state, auditext).change(TEXT, mutated, "m003")
    edited = mutated + b"\n\ndef users_work():\n    return 1\n"
    target.write_bytes(edited)
    code, _, err = audit(capsys, auditext, TEST, "--resume")
    assert code == 1 and one_line_error(err), err
    assert f"{TEXT} changed since the audit mutated it (m003)" in err
    assert target.read_bytes() == edited
    assert [p.read_bytes() for p in state.glob("original-*")] == [original]


def test_baseline_that_hangs_ends_within_the_budget(
    auditext: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    code, _, err = audit(capsys, auditext, "sleep 300", "--budget", "0.05")
    assert time.monotonic() - started < 30  # it never ended
    assert code == 1 and one_line_error(err), err
    assert "the baseline test run `sleep 300` did not finish within its limit" in err
    assert "--budget 0.05" in err
    assert git(auditext, "status", "--porcelain") == ""


@pytest.mark.slow
@needs_compiler
def test_each_mutation_run_has_a_time_limit(
    built_auditext: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The suite passes on the clean tree and hangs on any change: each run is killed
    at --run-limit and the hang counts as its files failing."""
    auditext = built_auditext
    hangs_when_changed = f"if git diff --quiet; then {TEST}; else sleep 300; fi"
    report = auditext.parent / "report.json"
    started = time.monotonic()
    code, _, err = audit(
        capsys, auditext, hangs_when_changed, "--run-limit", "0.02", "--mutations", "1",
        "--report", str(report),
    )  # fmt: skip
    assert code == 0, err
    assert time.monotonic() - started < 60
    (result,) = json.loads(report.read_text())["results"]
    assert result["failing_files"], result
    assert git(auditext, "status", "--porcelain") == ""


def test_a_baseline_where_nothing_passes_stops(
    auditext: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--test false`: every file 'crashed', all were excluded, the mutations ran and
    the audit exited 0 measuring nothing."""
    code, _, err = audit(capsys, auditext, "false")
    assert code == 2 and one_line_error(err), err
    assert "no test passes in the unmutated tree with `false`" in err
    assert "2 crashed" in err
    assert not (auditext / ".git" / STATE_DIR / "report.json").exists()


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_budget_and_run_limit_are_positive(
    auditext: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    for flag in ("--budget", "--run-limit"):
        code, _, err = audit(capsys, auditext, TEST, flag, value)
        assert code == 2 and one_line_error(err) and f"{flag} must be a positive" in err
