"""What the reliability passes' tests share: running the CLI and pytest, reading errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from indexer.query.index import Index
from indexer.workspace import Workspace
from pytest_torchtalk.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(err: str) -> bool:
    return err.startswith("torchtalk: error: ") and err.count("\n") == 1


def build(repo: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    return run(capsys, "index", "build", "--source", str(repo), "-q", *extra)


def run_pytest(
    repo: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    base = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=repo,
        env={**base, **(env or {})},
        capture_output=True,
        encoding="utf-8",
        errors="backslashreplace",  # pytest prints a Latin-1 name as its bytes
        timeout=timeout,
        check=False,
    )


def torchtalk_process(
    *argv: str, env: dict[str, str] | None = None, timeout: float = 300, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """``torchtalk ARGV`` in a process of its own (for what kills, hangs or fills a disk)."""
    return subprocess.run(
        [sys.executable, "-m", "pytest_torchtalk", *argv],
        env={**os.environ, **(env or {})},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def index_files(repo: Path, db_path: Path | None = None) -> dict[str, str]:
    index = Index(db_path or Workspace.resolve(repo).db_path)
    try:
        return dict(index.conn.execute("SELECT path, sha FROM files"))
    finally:
        index.close()


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


needs_root = pytest.mark.skipif(not is_root(), reason="needs root (mknod, mount)")
