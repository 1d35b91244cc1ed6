"""Same answers: ``torchtalk select --json`` by two code trees on seeded changes of one
source clone, without and with a record beside each index.

Each change adds a statement to one function (``bench/sampled_changes.py``'s edit):
``at::native::matmul`` first, then ``--count`` sampled functions, half C++/CUDA under
``--cpp-under`` and half Python under ``--python-under`` (test directories left out),
in an order fixed by ``--seed``. For each change, each code selects with its own cache
(``TORCHTALK_CACHE_DIR``: index it first, with that code, for the clone), once without
and once with ``--record`` copied beside its index; the file is restored after. The
reports are compared on what they select and why (not timings). Prints one line per
change, writes every report to ``--out``, and exits 1 when some answer differs.

    python bench/same_answers.py --before /tmp/code-a --after /tmp/code-b \\
        --before-cache /tmp/c-a --after-cache /tmp/c-b --source /tmp/pt-clone \\
        --seed 6 --count 40 --record /path/record.ttr --out /tmp/same.json [--resume]

``--plan PLAN`` takes the changes from an audit's mutation plan instead (a report's
``plan``, or ``bench/audit_plan.py``'s output): each mutation's line rewritten as the
audit does (``indexer.audit.mutation.rewrite``), none built or tested.

``--before-only`` selects with the "before" code alone (the rows a later run's
``--reuse-before`` takes; nothing is compared).

``--resume`` keeps the changes ``--out`` holds and runs the rest. ``--reuse-before
EARLIER.json`` takes the "before" side's answers of the changes an earlier run (its
``--out``) holds, so only the "after" code selects for them: the comparison again after
the "after" code changed (a merge) costs one side. The changes are still sampled from
the index in ``--before-cache``, which must be the one the earlier run sampled from.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sampled_changes import _edit  # the same edit as the sampling bench

from indexer.audit.mutation import Mutation, rewrite

CPP = ("cpp_function", "cuda_kernel")
PYTHON = ("python_function",)


def _index_dir(cache: Path) -> Path:
    found = sorted(cache.glob("indexes/*/index.sqlite"))
    if len(found) != 1:
        raise SystemExit(f"{cache}: expected one index, found {len(found)}")
    return found[0].parent


def _changes(
    db: Path, seed: int, count: int, cpp_under: str, python_under: str
) -> tuple[list[tuple], list[tuple[list[tuple], int]]]:
    """matmul, and candidate functions (kind, qualname, path, line, end) of each language
    shuffled by ``seed``, with how many of each to change (``count``, halved)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    try:
        manifest = json.loads(
            conn.execute("SELECT value FROM meta WHERE key = 'manifest'").fetchone()[0]
        )
        test_dirs = [*manifest.get("tests", {}).get("dirs", ())]

        def functions(kinds: tuple[str, ...], under: str) -> list[tuple]:
            rows = conn.execute(
                "SELECT n.kind, n.qualname, f.path, n.line, n.end_line FROM nodes n"
                " JOIN files f ON f.id = n.file_id"
                f" WHERE n.kind IN ({','.join('?' * len(kinds))}) AND f.path LIKE ?"
                " AND n.end_line - n.line >= 3 ORDER BY n.id",
                (*kinds, f"{under}%"),
            ).fetchall()
            rows = [
                r for r in rows if not any(r[2].startswith(d.rstrip("/") + "/") for d in test_dirs)
            ]
            random.Random(seed).shuffle(rows)
            return rows

        matmul = conn.execute(
            "SELECT n.kind, n.qualname, f.path, n.line, n.end_line FROM nodes n"
            " JOIN files f ON f.id = n.file_id WHERE n.qualname = 'at::native::matmul'"
            " AND n.kind IN ('cpp_function', 'cuda_kernel') ORDER BY n.end_line - n.line DESC"
            " LIMIT 1"
        ).fetchall()
        groups = [
            (functions(CPP, cpp_under), count - count // 2),
            (functions(PYTHON, python_under), count // 2),
        ]
        return matmul, groups
    finally:
        conn.close()


def _plan_changes(path: Path) -> list[tuple]:
    """The mutations of a plan (a list, or an audit report's ``plan``) as changes:
    (kind, "id scope", path, line, the mutation)."""
    found = json.loads(path.read_text())
    mutations = found["plan"] if isinstance(found, dict) else found
    return [
        (f"mutation:{m['kind']}", f"{m['id']} {m['scope']}", m["path"], m["line"], Mutation(**m))
        for m in mutations
    ]


def _mutate(path: Path, mutation: Mutation) -> bytes | None:
    """Apply ``mutation`` to ``path``; the original bytes, or None when the line is not
    the one the plan read."""
    original = path.read_bytes()
    try:
        path.write_bytes(rewrite(original, mutation))
    except ValueError:
        return None
    return original


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _select(python: str, code: Path, cache: Path, source: Path) -> tuple[dict[str, Any], float]:
    env = {**os.environ, "PYTHONPATH": str(code), "TORCHTALK_CACHE_DIR": str(cache)}
    cpu = _children_cpu()
    result = subprocess.run(
        [python, "-m", "pytest_torchtalk", "select", "--source", str(source), "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=code,
    )
    spent = _children_cpu() - cpu
    if result.returncode != 0:
        return {"error": result.stderr[-800:]}, spent
    return json.loads(result.stdout), spent


def _answers(report: dict[str, Any]) -> dict[str, Any]:
    """What a report selects and why, without timings or index bookkeeping."""
    if "error" in report:
        return report
    files = {
        entry["path"]: {
            "tests": entry["tests"],
            "devices": entry["devices"],
            "static_for": entry["static_for"],
            "record": sorted(
                (group.get("test_ids") or [], group["tests"])
                for group in entry.get("record_reasons", [])
            ),
            "decided": entry["decided_by_record"],
            "undecided": entry["undecided_by_record"],
            "runs": entry["runs"],
            "tests_run": entry.get("tests_run"),
        }
        for entry in report["selected"]
    }
    return {
        "everything": report["run_everything"],
        "files": files,
        "nothing": sorted(entry["path"] for entry in report.get("decided_nothing_to_run", [])),
        "record_used": report["record"].get("used"),
        "not_run": report["record"].get("failed_when_recorded_not_run"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="code tree (PYTHONPATH)")
    parser.add_argument("--after", type=Path, required=True, help="code tree (PYTHONPATH)")
    parser.add_argument("--before-cache", type=Path, required=True)
    parser.add_argument("--after-cache", type=Path, required=True)
    parser.add_argument("--source", type=Path, required=True, help="the clone both index")
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--count", type=int, default=40)
    parser.add_argument("--record", type=Path, help="a record to select with as well")
    parser.add_argument("--cpp-under", default="aten/src/ATen/native/")
    parser.add_argument("--python-under", default="torch/")
    parser.add_argument("--python", default=sys.executable, help="the interpreter to run")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--resume", action="store_true", help="keep the changes --out holds; run the rest"
    )
    parser.add_argument("--plan", type=Path, help="an audit's mutations as the changes")
    parser.add_argument(
        "--before-only",
        action="store_true",
        help="select with --before alone: rows for a later run's --reuse-before",
    )
    parser.add_argument(
        "--reuse-before",
        type=Path,
        metavar="EARLIER",
        help="an earlier run's --out: its 'before' answers stand, only --after selects again",
    )
    args = parser.parse_args()
    # Stopped, it still restores the edited file and takes the records away (``finally``).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))

    codes = {"before": (args.before, args.before_cache), "after": (args.after, args.after_cache)}
    dirs = {name: _index_dir(cache) for name, (_, cache) in codes.items()}
    if args.plan is not None:
        planned = _plan_changes(args.plan)
        first, groups = [], [(planned, len(planned))]
    else:
        first, groups = _changes(
            dirs["before"] / "index.sqlite",
            args.seed,
            args.count,
            args.cpp_under,
            args.python_under,
        )
    modes = [False, True] if args.record else [False]
    mode_names = [("record" if recorded else "static") for recorded in modes]
    for directory in dirs.values():  # the runs place and take away their own copy
        if (directory / "record.ttr").exists():
            raise SystemExit(f"{directory / 'record.ttr'}: a record is there; move it away first")
    earlier: dict[tuple, dict[str, Any]] = {}
    if args.reuse_before is not None:
        for row in json.loads(args.reuse_before.read_text()):
            if all(f"before_{mode}" in row for mode in mode_names):
                earlier[(row["kind"], row["change"], row["path"])] = row
    results: list[dict[str, Any]] = []
    if args.resume and args.out.exists():
        results = json.loads(args.out.read_text())
    done = {(row["kind"], row["change"], row["path"]) for row in results}
    differing = sum(not all(row["same"].values()) for row in results)

    def place_record(on: bool) -> None:
        for directory in dirs.values():
            target = directory / "record.ttr"
            if on:
                shutil.copyfile(args.record, target)
            else:
                target.unlink(missing_ok=True)

    def run(change: tuple) -> bool:
        kind, qualname, rel, line, end = change
        if (kind, qualname, rel) in done:
            return True
        path = args.source / rel
        mutated = isinstance(end, Mutation)
        original = _mutate(path, end) if mutated else _edit(path, kind, line, end)
        if original is None:
            print("skipped (no body, or not the line planned):", kind, qualname, rel, flush=True)
            return False
        row: dict[str, Any] = {"change": qualname, "path": rel, "kind": kind, "line": line}
        row["end"] = end.to_dict() if mutated else end
        reused = earlier.get((kind, qualname, rel))
        if reused is not None:
            for mode in mode_names:
                for key in (f"before_{mode}", f"before_{mode}_cpu_s"):
                    if key in reused:
                        row[key] = reused[key]
            row["before_from"] = str(args.reuse_before)
        started = time.perf_counter()
        try:
            for recorded in modes:
                place_record(recorded)
                mode = "record" if recorded else "static"
                for name, (code, cache) in codes.items():
                    if (name == "before" and reused is not None) or (
                        name == "after" and args.before_only
                    ):
                        continue
                    report, cpu = _select(args.python, code, cache, args.source)
                    row[f"{name}_{mode}"] = _answers(report)
                    row[f"{name}_{mode}_cpu_s"] = round(cpu, 3)
        finally:
            path.write_bytes(original)
            place_record(False)
        # As JSON: answers reused from an earlier run's file hold lists for tuples.
        plain = json.loads(json.dumps(row))
        same = {
            mode: plain[f"before_{mode}"] == plain.get(f"after_{mode}", plain[f"before_{mode}"])
            for mode in ("static", "record")[: len(modes)]
        }
        row["same"] = same
        nonlocal differing
        differing += not all(same.values())
        sizes = {
            mode: (
                len(row[f"before_{mode}"].get("files", {})),
                len(row.get(f"after_{mode}", {}).get("files", {})),
            )
            for mode in same
        }
        cpu = {k: v for k, v in row.items() if k.endswith("_cpu_s")}
        print(
            len(results) + 1, kind, qualname, sizes, same, cpu,
            f"{time.perf_counter() - started:.0f}s", flush=True,
        )  # fmt: skip
        results.append(row)
        args.out.write_text(json.dumps(results, indent=1))
        return True

    for change in first:
        run(change)
    for rows, wanted in groups:
        made = 0
        for change in rows:
            if made >= wanted:
                break
            made += run(change)
    print(f"{len(results)} changes, {differing} with a different answer", flush=True)
    sys.exit(1 if differing else 0)


if __name__ == "__main__":
    main()
