"""`torchtalk demo`: the main job end to end on a small extension shipped with TorchTalk.

The example project (``pytest_torchtalk/demo_project``: two ops registered with
``TORCH_LIBRARY``, their CPU kernels, a CUDA kernel, a Python package calling them, four
test files) is copied into a temporary git repository with its own index cache, indexed,
changed by one line of its CUDA kernel, and asked which tests the change can break; then
pytest runs with ``--torchtalk-affected``, and the op is traced from Python to the kernel.
Offline, a few seconds, and nothing is left behind unless ``--keep``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import AbstractContextManager
from pathlib import Path

from indexer.environ import environment
from indexer.errors import TorchTalkError

PROJECT = Path(__file__).resolve().parent.parent / "demo_project"
NAME = "tinyops"
KERNEL = "csrc/scale_kernel.cu"
# The one-line change: an off-by-one bound, the kind of bug the selected tests catch.
BEFORE, AFTER = "  if (i < n) {", "  if (i <= n) {"
TRACED = "tinyops.scale"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo", help="index a small example extension, change its CUDA kernel, select the tests"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the temporary repository and say where it is"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="torchtalk-demo-"))
    try:
        repo = work / NAME
        with _private_cache(work):
            _demo(repo)
        print()
        print(f"done in {time.perf_counter() - started:.1f}s.")
        if args.keep:
            print(f"the repository, with the change: {repo} (index: {work / 'cache'})")
        print("On your own extension: in its git repository, `torchtalk index build`; change")
        print("something; then `torchtalk select`, or `pytest --torchtalk-affected`.")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def _demo(repo: Path) -> None:
    from indexer.build import build_index
    from indexer.query.index import Index
    from indexer.query.trace import trace
    from indexer.select_changes import select_changes
    from indexer.wording import plural
    from indexer.workspace import Workspace
    from pytest_torchtalk.report import summary_lines

    shutil.copytree(PROJECT, repo, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "tinyops, the example extension")
    tests = sorted(path.name for path in (repo / "tests").glob("test_*.py"))
    print(f"torchtalk demo: {NAME}, a small PyTorch C++/CUDA extension, in a new git repository")
    print(f"  {repo} (removed at the end; --keep keeps it)")
    print("  csrc/ops.cpp registers the ops scale and clamp_abs (TORCH_LIBRARY) and their CPU")
    print(f"  kernels; {KERNEL} is scale's CUDA kernel; {NAME}/ calls them from Python;")
    print(f"  tests/ has {', '.join(tests)}")

    _step(1, "torchtalk index build")
    workspace = Workspace.resolve(repo)
    built = build_index(workspace, show_progress=False)
    nodes = sum(built.counts["nodes"].values())
    edges = sum(built.counts["edges"].values())
    print(
        f"  {plural(built.files, 'file')}: {plural(nodes, 'node')} (functions, kernels, ops, "
        f"Python symbols, tests), {plural(edges, 'edge')} in {built.timings['total_s']:.1f}s"
    )

    line = _change(repo / KERNEL)
    _step(2, f"a one-line change to the CUDA kernel, {KERNEL}:{line}")
    print(f"  -{BEFORE}")
    print(f"  +{AFTER}")

    _step(3, "torchtalk select: the tests this change can break, and why")
    selection = select_changes(workspace, "main")
    for text in summary_lines(selection, detail=True):
        for part in _wrapped_chain(text):
            print(f"  {part}")

    _step(4, "pytest --torchtalk-affected")
    for text in _pytest_lines(repo):
        print(f"  {text}")

    _step(5, f"the MCP server's trace tool: {TRACED}, from Python to the kernels")
    index = Index(workspace.db_path)
    try:
        for text in trace(index, TRACED).to_text().splitlines():
            print(f"  {text}")
    finally:
        index.close()


def _step(number: int, title: str) -> None:
    print()
    print(f"{number}. {title}")


def _change(path: Path) -> int:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    number = next(n for n, line in enumerate(lines, 1) if line.rstrip("\n") == BEFORE)
    lines[number - 1] = AFTER + "\n"
    path.write_text("".join(lines), encoding="utf-8")
    return number


def _wrapped_chain(text: str) -> list[str]:
    """A ``because`` line's chain one hop a line: the change, then each use, to the test."""
    head, sep, chain = text.partition("because ")
    if not sep:
        return [text]
    hops = chain.split(" <- ")
    indent = " " * len(head)
    return [f"{head}because {hops[0]}", *(f"{indent}  <- {hop}" for hop in hops[1:])]


def _pytest_lines(repo: Path) -> list[str]:
    """The plugin's own summary of a real pytest run in the repository."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTEST_ADDOPTS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--torchtalk-affected", "-p", "no:cacheprovider", "-rs"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = done.stdout.splitlines()
    wanted = [line for line in lines if line.startswith(("tests: ", "SKIPPED"))]
    if lines:
        wanted.append(lines[-1].strip("= "))
    if done.returncode not in (0, 5):
        wanted.append(f"(pytest exited with status {done.returncode}: {' '.join(done.args)})")
    return wanted


def _private_cache(work: Path) -> AbstractContextManager[None]:
    """The demo's index and configuration live in its temporary directory, not the user's."""
    return environment(
        {"TORCHTALK_CACHE_DIR": str(work / "cache"), "TORCHTALK_CONFIG_DIR": str(work / "config")}
    )


def _git(repo: Path, *args: str) -> None:
    identity = ["-c", "user.name=TorchTalk demo", "-c", "user.email=demo@torchtalk.invalid"]
    try:
        done = subprocess.run(
            ["git", *identity, "-c", "commit.gpgsign=false", *args],
            cwd=repo,
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError as exc:
        raise TorchTalkError(f"the demo needs git on PATH ({exc})") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        raise TorchTalkError(f"git {args[0]} failed in {repo}: {last}")
