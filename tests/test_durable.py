"""Atomic writes of reports, journals and restored sources (indexer/durable.py)."""

from __future__ import annotations

import os
from pathlib import Path

from indexer.durable import write_atomic


def test_a_new_file_gets_the_umask_and_a_replaced_one_keeps_its_mode(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        report = tmp_path / "reports" / "report.json"
        write_atomic(report, b"{}\n")
        assert report.read_bytes() == b"{}\n"
        assert report.stat().st_mode & 0o777 == 0o644  # as open() and --junitxml give it

        script = tmp_path / "build.sh"
        script.write_text("#!/bin/sh\n")
        script.chmod(0o750)
        write_atomic(script, b"#!/bin/sh\ntrue\n")
        assert script.read_bytes() == b"#!/bin/sh\ntrue\n"
        assert script.stat().st_mode & 0o777 == 0o750
    finally:
        os.umask(previous)
    # Nothing of the private files is left beside them.
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["build.sh", "report.json", "reports"]
