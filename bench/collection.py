"""What not collecting ruled-out test files saves: pytest's collection on PyTorch.

One change (a statement added at the top of ``torch.nn.utils.rnn.pack_padded_sequence``,
about 20 test files selected) and the same selection, collected two ways by
``pytest --collect-only --torchtalk-affected`` in a fresh process each time:

- *not collecting*: the plugin as it is, ruled-out files never imported;
- *collecting everything*: every test file imported and the ruled-out items deselected,
  as the plugin did before (``AffectedSelection.collect_ruled_out``).

A test module that calls ``sys.exit`` at import (PyTorch's distributed tests do, when
their backend is missing) ends pytest's whole session; so that collecting everything can
be timed at all, the bench counts such an exit as that module's collection error.

Printed per way: wall time of the whole process (the selection itself included, the same
in both), pytest's own collection time, items collected and deselected, files not
collected, collection errors (the tree's own, in this environment). The tree's tests import the installed torch, so the
interpreter given by ``--python`` needs torch of the tree's version (2.6) and pytest;
TorchTalk and its dependencies are taken from this interpreter, after that one's own.
The index must be built (``torchtalk index build --source PATH``, under
TORCHTALK_CACHE_DIR if set). Edits the tree and restores it.

    python bench/collection.py --source PATH --python /path/to/torch-2.6/bin/python
        [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = Path.home() / ".cache" / "torchtalk-corpora" / "pytorch-2.6"
CHANGED = "torch/nn/utils/rnn.py"
FUNCTION = "def pack_padded_sequence("
STATEMENT = "    _torchtalk_bench = None  # bench/collection.py"

# Run by the interpreter with torch: the tree's own torch/ (no compiled _C) must not
# shadow the installed one, and TorchTalk comes after that interpreter's packages.
BOOTSTRAP = """
import os, sys
sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd())]
sys.path.extend(os.environ["BENCH_TORCHTALK_PATHS"].split(os.pathsep))
import pytest
import _pytest.python
from pytest_torchtalk.selection import AffectedSelection
AffectedSelection.collect_ruled_out = os.environ["BENCH_COLLECT_ALL"] == "1"
_import = _pytest.python.importtestmodule
def importtestmodule(path, config):
    try:
        return _import(path, config)
    except SystemExit as exc:  # would end the whole session
        raise _pytest.python.Module.CollectError(f"SystemExit({exc.code}) at import")
_pytest.python.importtestmodule = importtestmodule
sys.exit(pytest.main(sys.argv[1:]))
"""


def add_statement(path: Path) -> str:
    """Insert STATEMENT after the signature and docstring of FUNCTION; the original text."""
    original = path.read_text(encoding="utf-8")
    lines = original.split("\n")
    at = next(n for n, line in enumerate(lines) if line.startswith(FUNCTION))
    while not lines[at].rstrip().endswith(":"):
        at += 1
    at += 1
    if lines[at].strip().startswith(('"""', 'r"""')):
        if lines[at].count('"""') < 2:  # the docstring goes on to a closing line
            at += 1
            while '"""' not in lines[at]:
                at += 1
        at += 1
    lines.insert(at, STATEMENT)
    path.write_text("\n".join(lines), encoding="utf-8")
    return original


def collect(source: Path, python: str, collect_all: bool, report: Path) -> dict:
    env = dict(os.environ)
    env.pop("PYTEST_ADDOPTS", None)
    env["BENCH_COLLECT_ALL"] = "1" if collect_all else "0"
    env["BENCH_TORCHTALK_PATHS"] = os.pathsep.join(
        [str(REPO), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    )
    command = [
        python,
        "-c",
        BOOTSTRAP,
        "--collect-only",
        "-q",
        "-p",
        "no:cacheprovider",
        "--torchtalk-affected",
        f"--torchtalk-report={report}",
        # test/torch_np/conftest.py declares --runslow only when its directory is an
        # argument, yet reads it for every item: an internal error either way otherwise.
        "--ignore=test/torch_np",
    ]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=source, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    tail = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-300:]
    pytest_s = re.search(r" in ([\d.]+)s", tail)
    errors = re.search(r"(\d+) errors?", tail)
    counts = json.loads(report.read_text())["counts"] if report.is_file() else {}
    return {
        "wall_s": wall,
        "pytest_s": float(pytest_s.group(1)) if pytest_s else None,
        "errors": int(errors.group(1)) if errors else 0,
        "exit": done.returncode,
        "tail": tail,
        "counts": counts,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--python", required=True, help="an interpreter with torch 2.6")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each way")
    args = parser.parse_args()
    source = args.source.resolve()
    path = source / CHANGED
    original = add_statement(path)
    try:
        # Bring the index up to date for the change once, outside the timed runs.
        subprocess.run(
            [sys.executable, "-m", "pytest_torchtalk", "select", "--source", str(source)],
            check=True,
            capture_output=True,
        )
        with tempfile.TemporaryDirectory() as scratch:
            runs: dict[str, list[dict]] = {"not collecting": [], "collecting everything": []}
            for attempt in range(args.repeat):
                for way, collect_all in (
                    ("not collecting", False),
                    ("collecting everything", True),
                ):
                    report = Path(scratch) / f"{attempt}-{collect_all}.json"
                    runs[way].append(collect(source, args.python, collect_all, report))
    finally:
        path.write_text(original, encoding="utf-8")
    print(f"change: a statement at the top of {FUNCTION[4:-1]} ({CHANGED}), tree {source}")
    for way, results in runs.items():
        counts = results[-1]["counts"]
        print(f"{way}:")
        print(
            f"  test files selected {counts.get('test_files_selected')} of "
            f"{counts.get('test_files_total')}; items collected {counts.get('collected')}, "
            f"selected {counts.get('selected')}, deselected {counts.get('deselected')}; "
            f"test files not collected {counts.get('test_files_not_collected')}"
        )
        for result in results:
            print(
                f"  wall {result['wall_s']:.1f} s, pytest's collection "
                f"{result['pytest_s']} s, collection errors {result['errors']}, "
                f"exit {result['exit']}: {result['tail']}"
            )


if __name__ == "__main__":
    main()
