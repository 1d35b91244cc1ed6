"""Selection time for a new C++ file, as the number of its functions doubles.

A change adding one file of N one-line functions, each calling the previous one, is
selected (``select_changes``: the index updated for the new file, then placement, the
impact walk and its fallbacks) on a copy of the minitorch fixture, for N and 2N
functions; the ratio of the two times is printed. Selection cost must be linear in the
size of the change: target ratio <= 2.5. ``--megabytes`` also times one generated file
of about that size (target: a 3 MB file selects in under 30 s).

    python bench/new_cpp_file.py [--functions 400] [--megabytes 3] [--repeat 1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from indexer.build import build_index  # noqa: E402
from indexer.select_changes import select_changes  # noqa: E402
from indexer.workspace import Workspace  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "minitorch"
NEW_FILE = "aten/src/ATen/native/Generated.cpp"
FUNCTION_BYTES = 66  # what one generated function takes, on average (for --megabytes)


def chained_functions(count: int) -> str:
    """``count`` one-line functions in at::native, each calling the previous one."""
    lines = ["namespace at { namespace native {", "int generated_0(int x) { return x; }"]
    lines += [
        f"int generated_{i}(int x) {{ return generated_{i - 1}(x) + {i}; }}"
        for i in range(1, count)
    ]
    lines.append("}}  // namespace at::native")
    return "\n".join(lines) + "\n"


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def fixture_repo(dest: Path) -> Path:
    shutil.copytree(FIXTURE, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    _git(dest, "init", "-q", "-b", "main")
    _git(dest, "add", "-A")
    _git(dest, "-c", "user.name=bench", "-c", "user.email=bench@invalid", "commit", "-qm", "base")
    return dest


def time_selection(work: Path, count: int) -> tuple[float, float, int, bool, dict]:
    """Wall and CPU seconds to select for a new file of ``count`` functions (all in this
    process: the update of so few files uses no pool), with the number of changed
    entities, whether everything runs, and the engine's own breakdown."""
    repo = fixture_repo(work / f"repo-{count}")
    workspace = Workspace.resolve(repo)
    build_index(workspace, show_progress=False)
    (repo / NEW_FILE).write_text(chained_functions(count), encoding="utf-8")
    started, cpu = time.perf_counter(), time.process_time()
    selection = select_changes(workspace, "HEAD")
    took, cpu = time.perf_counter() - started, time.process_time() - cpu
    return took, cpu, len(selection.entities), selection.run_everything, selection.timings


def _phases(timings: dict) -> str:
    return ", ".join(
        f"{name.removesuffix('_s')} {seconds:.1f}"
        for name, seconds in timings.items()
        if name != "total_s"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--functions", type=int, default=400, help="N (default 400)")
    parser.add_argument("--megabytes", type=float, default=3.0, help="0 to skip the big file")
    parser.add_argument("--repeat", type=int, default=1, help="best of this many runs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="torchtalk-bench-") as tmp:
        work = Path(tmp)
        os.environ["TORCHTALK_CACHE_DIR"] = str(work / "cache")
        os.environ["TORCHTALK_CONFIG_DIR"] = str(work / "config")
        times, cpus = {}, {}
        for count in (args.functions, 2 * args.functions):
            runs = []
            for attempt in range(args.repeat):
                took, cpu, entities, everything, timings = time_selection(
                    work / f"{count}-{attempt}", count
                )
                runs.append((took, cpu))
            times[count], cpus[count] = min(runs)
            print(
                f"N={count}: {times[count]:.2f} s, {cpus[count]:.2f} s CPU ({entities} changed "
                f"entities{', runs everything' if everything else ''})"
            )
        ratio = times[2 * args.functions] / times[args.functions]
        cpu_ratio = cpus[2 * args.functions] / cpus[args.functions]
        print(f"ratio 2N/N: {ratio:.2f}, CPU {cpu_ratio:.2f} (target <= 2.5)")
        if args.megabytes:
            count = int(args.megabytes * 1_000_000 / FUNCTION_BYTES)
            took, cpu, entities, everything, timings = time_selection(work / "big", count)
            size = len(chained_functions(count).encode()) / 1e6
            print(
                f"{size:.1f} MB file ({count} functions): {took:.1f} s, {cpu:.1f} s CPU "
                f"({entities} changed entities{', runs everything' if everything else ''}; "
                "target < 30 s)"
            )
            print(f"  phases (s): {_phases(timings)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
