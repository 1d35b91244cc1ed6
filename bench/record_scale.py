"""A record of PyTorch's whole CPU-runnable suite: what merging, reading and selecting cost.

Real per-file records (bench/record.py --record-only) are replicated over every test file
of the suite with its real test count (``pytest --collect-only``, one process per
directory of test/, cached in the out dir), split in CI shards (32), and then:

1. the shards are merged by ``torchtalk record merge`` (a fresh process): its wall time
   and peak memory, and the merged record's size;
2. the record is put beside a copy of the tree's index (in the out dir's own cache, so
   the index the caller built is not touched) and ``torchtalk select`` is timed with the
   index up to date, in a fresh process as CI runs it, for at::native::matmul and sampled
   single-function kernel changes (the edit bench/selection.py makes; target < 1 s);
3. the MCP ``affected`` tool with the record beside the index: first call (reads the
   record) and later calls;
4. ``snapshot save``, ``export`` and ``import`` (into an empty cache) with the record.

Needs the tree, a venv with torch 2.6 and pytest (to collect), the per-file records and
an index of the tree (``torchtalk index build --source PATH``):

    python bench/record_scale.py --source ~/.cache/torchtalk-corpora/pytorch-2.6 \
        --python /path/to/venv-pt26/bin/python --records /tmp/record-bench/records \
        --out /tmp/record-scale [--shards 32] [--samples 10] [--seed 6]

Edits the tree (one function at a time) and restores every file it touched.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
import zlib
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from record import eligible  # the files bench/record.py records: the CPU-runnable suite
from selection import _insert_statement  # the edit bench/selection.py makes

from indexer.locations import cache_dir
from indexer.record import storage
from indexer.record.model import Record, RecordedTest
from indexer.workspace import Workspace

MATMUL = "at::native::matmul"
NATIVE = "aten/src/ATen/native/"
_NODEID = re.compile(r"^(test/[^:\s]+\.py)::", re.M)
_FINISHED = re.compile(r"^(\d+ tests? collected|no tests collected|\d+ errors?).* in [\d.]+s", re.M)


# --- 1. the suite's shape: test files and their test counts -----------------------------


def _collect(python: str, source: Path, files: list[str], timeout: float) -> dict[str, int] | None:
    """file -> tests collected, for ``files`` (paths under test/) in one process; None when
    the process did not finish (timeout, crash): its counts may be partial."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    command = [python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
               "--continue-on-collection-errors", *files]  # fmt: skip
    try:
        done = subprocess.run(command, cwd=source / "test", env=env, capture_output=True,
                              text=True, timeout=timeout, check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        return None
    if not _FINISHED.search(done.stdout[-2000:]):
        return None  # it did not reach pytest's last line: killed, or crashed
    counts = dict.fromkeys((f"test/{f}" for f in files), 0)
    for path in _NODEID.findall(done.stdout):
        if path in counts:
            counts[path] += 1
    return counts


def suite_shape(python: str, source: Path, out: Path, timeout: float) -> dict[str, int]:
    """test file -> its test count, collected once per directory of test/ and cached
    (out/collect/); a directory whose process does not finish is collected file by file."""
    cache = out / "collect"
    cache.mkdir(parents=True, exist_ok=True)
    groups: dict[str, list[str]] = defaultdict(list)
    for file in eligible(source):
        groups[file.split("/", 1)[0] if "/" in file else "."].append(file)
    counts: dict[str, int] = {}
    for group, files in sorted(groups.items()):
        saved = cache / f"{group.replace('/', '__')}.json"
        if saved.is_file():
            counts.update(json.loads(saved.read_text()))
            continue
        started = time.perf_counter()
        found = _collect(python, source, files, timeout)
        how = "one process"
        if found is None:
            how = "file by file"
            found = {}
            for file in files:
                one = _collect(python, source, [file], timeout / 4)
                found.update(one if one is not None else {f"test/{file}": 0})
        saved.write_text(json.dumps(found, indent=0, sort_keys=True))
        counts.update(found)
        took = time.perf_counter() - started
        print(f"  collected test/{group}: {len(files)} files, {sum(found.values())} tests "
              f"({how}, {took:.0f} s)", flush=True)  # fmt: skip
    return counts


# --- 2. the record: real per-file records replicated over the suite ------------------------


class Template:
    """One real per-file record, to be stamped onto other test files: what its tests and
    fixtures executed, its own file's names (its functions, its module) renamed."""

    def __init__(self, record: Record) -> None:
        self.record = record
        self.file = record.tests[0].file
        self.tests = [t for t in record.tests if t.file == self.file]
        # per segment: the ids of names that are not the file's own, and those that are
        self.shared: list[list[int]] = []
        self.own: list[list[tuple[str, str]]] = []
        for segment in record.segments:
            names = [record.names[n] for n in segment.names]
            self.shared.append([n for n in segment.names if self.file not in record.names[n][1]])
            self.own.append([name for name in names if self.file in name[1]])


class Shard:
    """A shard's record, made of templates stamped onto its test files."""

    def __init__(self, meta: dict) -> None:
        self.record = Record(meta=dict(meta))
        self._ids: dict[int, dict[int, int]] = {}  # template -> its name id -> ours
        self._shared: dict[tuple[int, int], set[int]] = {}  # (template, segment) -> names
        self._segments: dict[tuple[str, str], int] = {}  # (kind, label) -> our segment

    def _shared_names(self, which: int, template: Template, segment: int) -> set[int]:
        key = (which, segment)
        if key not in self._shared:
            ids = self._ids.setdefault(which, {})
            names = template.record.names
            for n in template.shared[segment]:
                if n not in ids:
                    ids[n] = self.record.name_id(*names[n])
            self._shared[key] = {ids[n] for n in template.shared[segment]}
        return self._shared[key]

    def stamp(self, which: int, template: Template, file: str, count: int) -> None:
        """``count`` tests of ``file``: the template's tests in turn, each with its own
        test segment; fixtures, collection and import work shared by label."""
        record = self.record
        per_file: dict[int, set[int]] = {}

        def names(segment: int) -> set[int]:
            if segment not in per_file:
                shared = self._shared_names(which, template, segment)
                own = {
                    record.name_id(kind, text.replace(template.file, file))
                    for kind, text in template.own[segment]
                }
                per_file[segment] = shared | own if own else shared
            return per_file[segment]

        def ours(segment: int, nodeid: str) -> int:
            source = template.record.segments[segment]
            if source.kind == "test":
                new = record.add_segment("test", nodeid)
                record.segments[new].names = names(segment)
                return new
            key = (source.kind, source.label.replace(template.file, file))
            new = self._segments.get(key)
            if new is None:
                new = self._segments[key] = record.add_segment(*key)
                record.segments[new].names = set(names(segment))
            elif template.own[segment] or (which, segment) not in self._shared:
                record.segments[new].names |= names(segment)
            return new

        for index in range(count):
            test = template.tests[index % len(template.tests)]
            name = test.nodeid.split("::", 1)[1] if "::" in test.nodeid else test.nodeid
            nodeid = f"{file}::{name}" + (f"_{index}" if index >= len(template.tests) else "")
            record.tests.append(
                RecordedTest(nodeid, file, test.outcome, test.duration,
                             [ours(s, nodeid) for s in test.segments], test.unrecorded)
            )  # fmt: skip


def make_shards(
    templates: list[Template], counts: dict[str, int], meta: dict, shards: int, out: Path
) -> list[Path]:
    """The suite's record as ``shards`` files, test files dealt to shards by size."""
    dealt: list[list[tuple[str, int]]] = [[] for _ in range(shards)]
    load = [0] * shards
    for file, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        if count:
            smallest = load.index(min(load))
            dealt[smallest].append((file, count))
            load[smallest] += count
    paths = []
    (out / "shards").mkdir(exist_ok=True)
    for number, files in enumerate(dealt):
        shard = Shard(meta)
        for file, count in files:
            which = hash_of(file) % len(templates)
            shard.stamp(which, templates[which], file, count)
        paths.append(storage.write(shard.record, out / "shards" / f"shard-{number:02}.ttr"))
    return paths


def hash_of(text: str) -> int:
    return zlib.crc32(text.encode())


# --- measuring -------------------------------------------------------------------------------


# Each measured command runs under this wrapper, whose only child it is: the peak memory
# of its children is then the command's own.
_WRAPPER = (
    "import resource, subprocess, sys\n"
    "code = subprocess.run(sys.argv[1:]).returncode\n"
    "usage = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "cpu = usage.ru_utime + usage.ru_stime\n"
    "print(f'TTPEAK {usage.ru_maxrss} {cpu:.3f}', file=sys.stderr)\n"
    "sys.exit(code)\n"
)


class Timed(NamedTuple):
    wall: float  # seconds
    cpu: float  # seconds of CPU (user + system): what a shared machine does not inflate
    peak: int  # resident KiB at most
    stdout: str


def timed_process(command: list[str], env: dict[str, str] | None = None) -> Timed:
    """What ``command`` costs in a fresh process."""
    env = dict(os.environ if env is None else env)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # CI keeps compiled modules: so does the bench
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _WRAPPER, *command], env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    wall = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"{' '.join(command[2:6])} failed: {done.stderr.strip()[-800:]}")
    peak, cpu = re.findall(r"^TTPEAK (\d+) (\S+)$", done.stderr, re.M)[-1]
    return Timed(wall, float(cpu), int(peak), done.stdout)


def torchtalk(*args: str, env: dict[str, str] | None = None) -> Timed:
    return timed_process([sys.executable, "-m", "pytest_torchtalk", *args], env)


def select_seconds(source: Path) -> tuple[Timed, dict]:
    timed = torchtalk("select", "--source", str(source), "--json")
    return timed, json.loads(timed.stdout)


def private_index(source: Path, out: Path) -> Path:
    """A copy of the tree's index (what it derived is inside it) in the out dir's cache: the caller's
    index is never given this record or updated for these edits."""
    built = Workspace.resolve(source).db_path
    if not built.is_file():
        raise SystemExit(f"no index of {source} at {built}: torchtalk index build --source ...")
    os.environ["TORCHTALK_CACHE_DIR"] = str(out / "cache")
    own = Workspace.resolve(source).db_path
    own.parent.mkdir(parents=True, exist_ok=True)
    for path in built.parent.iterdir():
        if path.name.startswith("index.sqlite") and path.is_file():
            shutil.copyfile(path, own.parent / path.name)
    return own


def changes(
    source: Path, db_path: Path, samples: int, seed: int
) -> list[tuple[str, str, int, int]]:
    """(qualname, path, line, end line): matmul, then ``samples`` sampled kernel functions."""
    import sqlite3

    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    rows = conn.execute(
        "SELECT n.qualname, f.path, n.line, n.end_line FROM nodes n JOIN files f ON f.id = n.file_id"
        " WHERE n.kind IN ('cpp_function', 'cuda_kernel') AND f.path LIKE ?"
        " AND n.end_line - n.line >= 3 ORDER BY n.id",
        (NATIVE + "%",),
    ).fetchall()
    conn.close()
    matmul = max((r for r in rows if r[0] == MATMUL), key=lambda r: r[3] - r[2])
    rng = random.Random(seed)
    rng.shuffle(rows)
    return [matmul, *rows[: samples * 3]]  # some have no body to edit: more than needed


def select_over_changes(source: Path, picked: list, samples: int) -> list[dict]:
    rows = []
    for qualname, rel, line, end in picked:
        if len(rows) > samples:
            break
        path = source / rel
        original = _insert_statement(path, line, end)
        if original is None:
            continue
        try:
            select_seconds(source)  # updates the index for the edit: a PR job's first step
            timed, report = select_seconds(source)  # the index up to date
        finally:
            path.write_bytes(original)
        record = report.get("record") or {}
        row = {
            "change": qualname,
            "select_s": round(timed.wall, 2),
            "select_cpu_s": round(timed.cpu, 2),
            "engine": {k: round(v, 3) for k, v in report.get("timings", {}).items()},
            "run_everything": report["run_everything"],
            "files_selected": report["counts"]["test_files_selected"],
            "record_used": record.get("used"),
            "record_why_not": record.get("why_not"),
            "decided_by_record": record.get("trusted_tests"),
        }
        rows.append(row)
        print(f"  {qualname}: select {timed.wall:.2f} s ({timed.cpu:.2f} s CPU), "
              f"{row['files_selected']} files, "
              f"record used: {row['record_used']} {row['record_why_not'] or ''}", flush=True)  # fmt: skip
    select_seconds(source)  # the index as it was
    return rows


def profile_select(source: Path, out: Path, change: tuple[str, str, int, int]) -> list[str]:
    """Where a select's time goes (cProfile, cumulative), with ``change`` made."""
    import pstats

    _, rel, line, end = change
    path = source / rel
    original = _insert_statement(path, line, end)
    profile = out / "select.prof"
    try:
        select_seconds(source)  # the index up to date first
        timed_process([sys.executable, "-m", "cProfile", "-o", str(profile), "-m",
                       "pytest_torchtalk", "select", "--source", str(source), "--json"])  # fmt: skip
    finally:
        path.write_bytes(original)
    select_seconds(source)
    text = io.StringIO()
    pstats.Stats(str(profile), stream=text).sort_stats("cumulative").print_stats(40)
    print(text.getvalue(), flush=True)
    return text.getvalue().splitlines()


def mcp_affected(source: Path, names: list[str]) -> dict:
    from mcp_server.state import ServerState
    from mcp_server.tools import Tools

    state = ServerState(Workspace.resolve(source))
    state.start()
    try:
        state.wait_until_idle(1800)
        tools = Tools(state)
        times, cpu = [], []
        for name in names:
            started, started_cpu = time.perf_counter(), time.process_time()
            answer = tools.affected([name])
            times.append(round(time.perf_counter() - started, 2))
            cpu.append(round(time.process_time() - started_cpu, 2))
            assert not answer.is_error, answer
        return {"calls": names, "wall_s": times, "cpu_s": cpu}
    finally:
        state.stop()


def snapshot_round_trip(source: Path, out: Path) -> dict:
    archive = out / "scale.tar.gz"
    archive.unlink(missing_ok=True)
    if (cache_dir() / "snapshots" / "bench" / "scale").is_dir():  # a run stopped before
        torchtalk("snapshot", "delete", "bench/scale")
    saved = torchtalk("snapshot", "save", "bench/scale", "--source", str(source))
    exported = torchtalk("snapshot", "export", "bench/scale", "-o", str(archive))
    fresh = {**os.environ, "TORCHTALK_CACHE_DIR": str(out / "cache-import")}
    shutil.rmtree(out / "cache-import", ignore_errors=True)
    imported = torchtalk("snapshot", "import", str(archive), env=fresh)
    torchtalk("snapshot", "delete", "bench/scale")
    shutil.rmtree(out / "cache-import", ignore_errors=True)
    return {
        **{f"{what}_s": round(timed.wall, 1) for what, timed in
           (("save", saved), ("export", exported), ("import", imported))},
        **{f"{what}_cpu_s": round(timed.cpu, 1) for what, timed in
           (("save", saved), ("export", exported), ("import", imported))},
        "import_peak_mib": imported.peak // 1024, "archive_bytes": archive.stat().st_size,
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--python", required=True, help="a venv's Python with torch and pytest")
    parser.add_argument("--records", type=Path, required=True, help="per-file .ttr records")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shards", type=int, default=32)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--collect-timeout", type=float, default=1800.0, help="per directory")
    parser.add_argument("--stop-after", choices=("collect", "merge"), default=None)
    parser.add_argument(
        "--scale", type=float, default=1.0,
        help="each file's test count times this (the whole suite's merge peak is in "
        "docs/performance.md: a smaller machine measures a fraction and says so)",
    )  # fmt: skip
    parser.add_argument("--profile", action="store_true", help="cProfile one select")
    parser.add_argument(
        "--record", type=Path, default=None,
        help="a merged record of an earlier run (its report's scale) to select with, instead "
        "of making and merging the shards: the same record for two codes",
    )  # fmt: skip
    parser.add_argument(
        "--select-only", action="store_true", help="skip the MCP and snapshot measurements"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict = {"source": str(args.source)}

    print("collecting the suite's test counts (cached in out/collect/)", flush=True)
    counts = suite_shape(args.python, args.source, args.out, args.collect_timeout)
    report["test_files"] = sum(1 for c in counts.values() if c)
    report["tests"] = sum(counts.values())
    print(f"  {report['test_files']} test files with tests, {report['tests']} tests", flush=True)
    if args.stop_after == "collect":
        return 0

    merged = args.out / "record.ttr"
    if args.record is not None:
        if args.record.resolve() != merged.resolve():
            shutil.copyfile(args.record, merged)
        report["record_reused"] = str(args.record)
        return measure(args, report, merged)
    templates = []
    for path in sorted(args.records.glob("*.ttr")):
        record = storage.read(path)
        if record.tests:
            templates.append(Template(record))
    if not templates:
        raise SystemExit(f"no per-file record with tests in {args.records}")
    head = subprocess.run(["git", "-C", str(args.source), "rev-parse", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    meta = {**templates[0].record.meta, "commit": head,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}  # fmt: skip
    started = time.perf_counter()
    scaled = {file: round(count * args.scale) for file, count in counts.items()}
    report["scale"] = args.scale
    report["record_tests_made"] = sum(scaled.values())
    shards = make_shards(templates, scaled, meta, args.shards, args.out)
    report["templates"] = [t.file for t in templates]
    report["shards"] = len(shards)
    report["shard_bytes_total"] = sum(p.stat().st_size for p in shards)
    print(f"made {len(shards)} shards from {len(templates)} per-file records in "
          f"{time.perf_counter() - started:.0f} s", flush=True)  # fmt: skip

    timed = torchtalk("record", "merge", *map(str, shards), "-o", str(merged))
    report["merge_s"], report["merge_cpu_s"] = round(timed.wall, 1), round(timed.cpu, 1)
    report["merge_peak_mib"] = timed.peak // 1024
    report["record_bytes"] = merged.stat().st_size
    timed = torchtalk("record", "stats", "--record", str(merged), "--json")
    report["stats_s"], report["stats_cpu_s"] = round(timed.wall, 2), round(timed.cpu, 2)
    report["stats_peak_mib"] = timed.peak // 1024
    report["record_tests"] = json.loads(timed.stdout).get("tests")
    print(json.dumps(report, indent=2), flush=True)
    if args.stop_after == "merge":
        return 0
    return measure(args, report, merged)


def measure(args: argparse.Namespace, report: dict, merged: Path) -> int:
    """2-4: select, MCP affected and snapshots with the merged record beside the index."""
    db_path = private_index(args.source, args.out)
    shutil.copyfile(merged, db_path.with_name("record.ttr"))
    print("torchtalk select with the record, index up to date:", flush=True)
    picked = changes(args.source, db_path, args.samples, args.seed)
    rows = select_over_changes(args.source, picked, args.samples)
    report["select"] = rows
    times = [r["select_s"] for r in rows]
    report["select_matmul_s"] = times[0]
    report["select_matmul_cpu_s"] = rows[0]["select_cpu_s"]
    report["select_sampled_median_s"] = statistics.median(times[1:]) if len(times) > 1 else None
    report["select_sampled_max_s"] = max(times[1:], default=None)
    report["select_sampled_cpu_median_s"] = (
        statistics.median(r["select_cpu_s"] for r in rows[1:]) if len(rows) > 1 else None
    )
    if args.profile:
        report["select_profile"] = profile_select(args.source, args.out, picked[0])
    if args.select_only:
        (args.out / "report.json").write_text(json.dumps(report, indent=2))
        print(json.dumps({k: v for k, v in report.items() if k != "select"}, indent=2))
        return 0
    print("MCP affected with the record:", flush=True)
    report["mcp_affected"] = mcp_affected(
        args.source, [MATMUL, MATMUL, "at::native::addmm_out_cpu"]
    )
    print(f"  {report['mcp_affected']}", flush=True)
    print("snapshot save / export / import with the record:", flush=True)
    report["snapshot"] = snapshot_round_trip(args.source, args.out)
    print(f"  {report['snapshot']}", flush=True)
    (args.out / "report.json").write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k != "select"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
