"""What recording costs, before and after a change to the recorder, in one run.

Runs each of the first test files `bench/record.py` samples (same seed, same eligible
files) without recording and recorded by each given checkout of this project (its code on
PYTHONPATH), rotating the order per file and round so that a shared machine's drift falls
on all; reports each run's CPU seconds (its own children only, through bench/record.py's
wrapper) and the ratios over the run without recording (docs/performance.md):

    python bench/record_cost.py --source PYTORCH_CLONE --python /path/to/venv/bin/python \
        --files 4 --seed 0 --code before=/path/to/main --code after=. --out /tmp/cost

`--env LABEL:NAME=VALUE` sets a variable for one label's runs, so that two ways of one
checkout compare in one run (`--code profile=. --env profile:TORCHTALK_RECORD_PYTHON=profile
--code monitoring=. --env monitoring:TORCHTALK_RECORD_PYTHON=monitoring`); `--only FILE`
(repeatable) measures those test files instead of the sampled ones.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.record import _WRAPPER, eligible


def run(
    python: str, source: Path, file: str, code: Path | None, record: Path,
    extra_env: dict[str, str] | None = None,
) -> dict:  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", **(extra_env or {})}
    command = [python, "-m", "pytest", file, "-q", "-p", "no:cacheprovider"]
    if code is not None:
        env["PYTHONPATH"] = str(code)
        command.append(f"--torchtalk-record-to={record}")
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _WRAPPER, *command], cwd=source / "test", env=env,
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    found = re.findall(r"^TTCPU (\S+)$", done.stderr, re.M)
    tail = (done.stdout.strip().splitlines() or [""])[-1]
    return {
        "cpu": float(found[-1]) if found else None,
        "wall": round(time.perf_counter() - start, 2),
        "code": done.returncode,
        "tail": tail,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, required=True, help="a writable clone")
    parser.add_argument("--python", required=True, help="Python of a venv with torch")
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--code", action="append", required=True, help="LABEL=CHECKOUT")
    parser.add_argument("--env", action="append", default=[], help="LABEL:NAME=VALUE")
    parser.add_argument("--only", action="append", default=[], help="a test file (test/...)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    codes = {"none": None}
    for item in args.code:
        label, _, where = item.partition("=")
        codes[label] = Path(where).resolve()
    envs: dict[str, dict[str, str]] = {label: {} for label in codes}
    for item in args.env:
        label, _, assignment = item.partition(":")
        name, _, value = assignment.partition("=")
        if label not in envs or not name:
            parser.error(f"--env {item!r}: expected LABEL:NAME=VALUE with a --code LABEL")
        envs[label][name] = value
    args.out.mkdir(parents=True, exist_ok=True)
    candidates = eligible(args.source)
    random.Random(args.seed).shuffle(candidates)
    if args.only:
        candidates = [file.removeprefix("test/") for file in args.only]
    # bench/record.py keeps a file whose run exits 0, 1 or 5: the first --files such files.
    labels = list(codes)
    for label, code in codes.items():  # builds each checkout's recorder outside the runs
        if code is not None:
            run(
                args.python, args.source, candidates[0], code,
                args.out / f"warm-{label}.ttr", envs[label],
            )  # fmt: skip
    results: list[dict] = []
    for file in candidates:
        if len(results) == args.files:
            break
        runs: dict[str, list[dict]] = {label: [] for label in labels}
        for round_ in range(args.rounds):
            shift = (len(results) + round_) % len(labels)
            for label in labels[shift:] + labels[:shift]:
                record = args.out / f"{file.replace('/', '__')}.{label}.{round_}.ttr"
                runs[label].append(
                    run(args.python, args.source, file, codes[label], record, envs[label])
                )
                last = runs[label][-1]
                print(f"{file} {label}: cpu {last['cpu']} s, {last['tail']}", flush=True)
                if last["code"] not in (0, 1, 5):
                    break
            if any(r["code"] not in (0, 1, 5) for rs in runs.values() for r in rs):
                break
        if any(r["code"] not in (0, 1, 5) for rs in runs.values() for r in rs):
            print(f"dropped {file}", flush=True)
            continue
        results.append({"file": file, "runs": runs})
    totals = {label: sum(r["cpu"] for x in results for r in x["runs"][label]) for label in labels}
    report = {
        "seed": args.seed,
        "env": envs,
        "rounds": args.rounds,
        "files": results,
        "cpu_s": {label: round(total, 2) for label, total in totals.items()},
        "cpu_ratio": {
            label: round(total / totals["none"], 3) for label, total in totals.items()
        },
    }
    (args.out / "report.json").write_text(json.dumps(report, indent=1))
    for x in results:
        cpu = {label: sum(r["cpu"] for r in x["runs"][label]) for label in labels}
        ratios = " ".join(f"{label} {cpu[label] / cpu['none']:.3f}x" for label in labels[1:])
        print(f"{x['file']}: " + " ".join(f"{k} {v:.2f}" for k, v in cpu.items()) + f" | {ratios}")
    print(json.dumps({"cpu_s": report["cpu_s"], "cpu_ratio": report["cpu_ratio"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
