"""Recording PyTorch's own tests: the cost of `pytest --torchtalk-record`, and what it sees.

Samples test files of the PyTorch 2.6 tree at random (seeded), runs each with the
wheel's Python twice, without and with recording (in alternating order, so that drift of
a shared machine falls on both), and reports: the suite's wall and CPU time both ways and
their ratio (target: at most 1.3x), the record's size per 1,000 tests, ops per test, and
for a few ops how many of the recorded files execute each (in a test's own work) and
how many only import a module whose import executes it. The per-file records are
merged into one (`torchtalk record merge`), which bench/selection.py can select from.

Needs the tree (../shared/corpora/get-pytorch --git) and a venv with torch 2.6.0 and this
project (see ../shared/corpora/README.md):

    python bench/record.py --source ~/.cache/torchtalk-corpora/pytorch-2.6 \
        --python /path/to/venv/bin/python --files 40 --seed 0 --out /tmp/record-bench
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from indexer.query.recorded import RecordedRuns
from indexer.record import storage
from indexer.record.merge import merge

# Directories that need a build tree or a device, and device-named files
# (../shared/corpora/README.md).
EXCLUDED_DIRS = {"cpp", "cpp_extensions", "custom_operator", "custom_backend", "distributed"}
DEVICE_WORDS = ("cuda", "mps", "xpu", "vulkan")
GRACE_S = 15.0  # between a timeout's SIGTERM and its SIGKILL
OPS = ("matmul", "mm", "addmm", "sigmoid", "sort", "embedding_dense_backward")


def eligible(source: Path) -> list[str]:
    files = []
    for path in sorted((source / "test").rglob("test_*.py")):
        rel = path.relative_to(source / "test")
        if rel.parts[0] in EXCLUDED_DIRS or any(w in path.name for w in DEVICE_WORDS):
            continue
        files.append(rel.as_posix())
    return files


# Each run goes through this wrapper, whose children are that run alone: its CPU time is
# then the run's, also while other files are measured at the same time.
_WRAPPER = (
    "import resource, subprocess, sys\n"
    "code = subprocess.run(sys.argv[1:]).returncode\n"
    "usage = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(f'TTCPU {usage.ru_utime + usage.ru_stime:.3f}', file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def run(python: str, source: Path, file: str, extra: list[str], timeout: float) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    command = [python, "-m", "pytest", file, "-q", "-p", "no:cacheprovider", *extra]
    start = time.perf_counter()
    cpu = 0.0
    # A session of its own, so that a run over time is killed with everything it started
    # (pytest under the wrapper, inductor's compile workers), not left loading the cores.
    process = subprocess.Popen(
        [sys.executable, "-c", _WRAPPER, *command], cwd=source / "test", env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = process.communicate(timeout=timeout)
        code = process.returncode
        tail = (stdout.strip().splitlines() or [""])[-1]
        found = re.findall(r"^TTCPU (\S+)$", stderr, re.M)
        cpu = float(found[-1]) if found else 0.0
    except subprocess.TimeoutExpired:
        # As a CI job limit stops a job: SIGTERM, a grace period, then SIGKILL.
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.communicate(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
        code, tail = None, "timeout"
    wall = time.perf_counter() - start
    return {"code": code, "wall": wall, "cpu": cpu, "tail": tail}


def finalize(python: str, source: Path, record_path: Path) -> bool:
    """Turns what a stopped recording journaled into its record; True when one was written.

    A run the limit stopped may have written its record in the grace period (SIGTERM ends
    the session) or left only its journal (SIGKILL): either way the tests that finished count.
    """
    journal = Path(f"{record_path}.journal")
    if journal.is_dir() and any(journal.iterdir()):
        subprocess.run(
            [str(Path(python).parent / "torchtalk"), "record", "finalize", "--source",
             str(source), "-o", str(record_path), str(journal)],
            cwd=source, capture_output=True, text=True,
        )  # fmt: skip
    return record_path.is_file()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--python", required=True, help="Python of a venv with torch 2.6.0")
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument(
        "--only", action="append", default=[], metavar="FILE",
        help="record this file (a path under test/; repeatable) instead of a seeded sample",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=300.0, help="per run, seconds")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--jobs", type=int, default=1,
        help="files measured at once (each file's two runs stay back to back); the CPU-time "
        "ratio is the figure to read when the machine is shared",
    )  # fmt: skip
    parser.add_argument(
        "--record-only", action="store_true",
        help="skip the runs without recording: only the record is made (half the time; no "
        "overhead figure), e.g. for bench/selection_record.py",
    )  # fmt: skip
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "records").mkdir(exist_ok=True)
    candidates = eligible(args.source)
    random.Random(args.seed).shuffle(candidates)
    if args.only:
        candidates, args.files = list(args.only), len(args.only)
    results_dir = args.out / "results"
    results_dir.mkdir(exist_ok=True)
    # Builds the recorder for this torch (cached) outside the measured runs.
    warm_record = f"--torchtalk-record-to={args.out / 'warm-up.ttr'}"
    warm = run(args.python, args.source, candidates[0], ["--co", warm_record], args.timeout)
    print(f"warm-up (recorder build, caches): {warm['wall']:.1f} s", flush=True)

    def measure(position: int, file: str) -> dict:
        """Both runs of one file (kept in results/ so that a rerun resumes)."""
        saved = results_dir / (file.replace("/", "__") + ".json")
        if saved.is_file():
            return json.loads(saved.read_text())
        record_path = args.out / "records" / (file.replace("/", "__") + ".ttr")
        order = ("plain", "recorded") if position % 2 == 0 else ("recorded", "plain")
        if args.record_only:
            order = ("recorded",)
        runs = {}
        for which in order:
            extra = [f"--torchtalk-record-to={record_path}"] if which == "recorded" else []
            runs[which] = run(args.python, args.source, file, extra, args.timeout)
        result = {"file": file, "plain": runs.get("plain"), "recorded": runs["recorded"]}
        result["kept"] = all(r["code"] in (0, 1, 5) for r in runs.values())
        if runs["recorded"]["code"] is None:  # the limit struck: keep what finished, partial
            result["partial"] = finalize(args.python, args.source, record_path)
            result["kept"] = result["partial"] and args.record_only
        saved.write_text(json.dumps(result))
        return result

    results, dropped = [], []
    pending = iter(enumerate(candidates))
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        running = set()
        while len(results) < args.files:
            while len(running) < args.jobs and len(results) + len(running) < args.files:
                position, file = next(pending, (None, None))
                if file is None:
                    break
                running.add(pool.submit(measure, position, file))
            if not running:
                break
            done, running = concurrent.futures.wait(
                running, return_when=concurrent.futures.FIRST_COMPLETED
            )
            for future in done:
                result = future.result()
                recorded = result["recorded"]
                plain = result["plain"] or recorded  # --record-only: no run without
                if not result["kept"]:
                    dropped.append(
                        {
                            "file": result["file"],
                            "plain": plain["tail"],
                            "recorded": recorded["tail"],
                        }
                    )
                    print(
                        f"dropped {result['file']}: {plain['tail']} / {recorded['tail']}",
                        flush=True,
                    )
                    continue
                results.append(result)
                print(
                    f"{len(results):2} {result['file']}: {plain['wall']:.1f} s -> "
                    f"{recorded['wall']:.1f} s (cpu {plain['cpu']:.1f} -> {recorded['cpu']:.1f}) "
                    f"{recorded['tail']}",
                    flush=True,
                )
    results = results[: args.files]
    records = [storage.read(p) for p in sorted((args.out / "records").glob("*.ttr"))
               if any(p.name.startswith(r["file"].replace("/", "__")) for r in results)]  # fmt: skip
    merged_path = args.out / "record.ttr"
    storage.write(merge(records), merged_path)
    runs = RecordedRuns.open(merged_path)
    summary = runs.summary()
    ops = runs.per_test_counts("op")
    if args.record_only:  # no runs without recording: no overhead figure
        for r in results:
            r["plain"] = {"wall": 0.0, "cpu": 0.0}
    plain_wall = sum(r["plain"]["wall"] for r in results)
    recorded_wall = sum(r["recorded"]["wall"] for r in results)
    plain_cpu = sum(r["plain"]["cpu"] for r in results)
    recorded_cpu = sum(r["recorded"]["cpu"] for r in results)
    files_total = summary["test_files"]
    per_op, per_op_import = {}, {}
    for op in OPS:
        names = runs.matching_names("op", f"aten::{op}")
        per_op[op] = len(runs.files_executing(names))
        # ... and the files whose process imports a module whose import ran it
        importers = runs.importers(runs.import_work(names))
        per_op_import[op] = len({runs.record.tests[t].file for t in importers})
    with_ops = {test.file for test, count in zip(runs.record.tests, ops, strict=True) if count}
    no_ops = sum(1 for r in results if f"test/{r['file']}" not in with_ops)
    report = {
        "seed": args.seed,
        "files": len(results),
        "dropped": dropped,
        "tests": summary["tests"],
        "wall_plain_s": round(plain_wall, 1),
        "wall_recorded_s": round(recorded_wall, 1),
        "wall_ratio": round(recorded_wall / plain_wall, 3) if plain_wall else None,
        "cpu_plain_s": round(plain_cpu, 1),
        "cpu_recorded_s": round(recorded_cpu, 1),
        "cpu_ratio": round(recorded_cpu / plain_cpu, 3) if plain_cpu else None,
        "record_bytes": summary["bytes"],
        "bytes_per_1000_tests": round(summary["bytes"] * 1000 / max(1, summary["tests"])),
        "ops_per_test_median": statistics.median(ops) if ops else 0,
        "ops_per_test_max": max(ops, default=0),
        "recorded_test_files": files_total,
        "files_executing": per_op,
        "files_importing_a_module_whose_import_executes": per_op_import,
        "outcomes": summary["outcomes"],
        "unrecorded_tests": summary["unrecorded_tests"],
        "partial_files": [r["file"] for r in results if r.get("partial")],
        "files_without_ops": no_ops,
        "per_file": results,
    }
    (args.out / "report.json").write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k != "per_file"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
