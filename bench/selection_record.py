"""Selection with a recorded run on the PyTorch tree: how much it narrows, and whether it
keeps every test the record shows running the changed code.

For single-function changes in aten/src/ATen/native (a statement added to a function's
body: four named ones - matmul, a unary CPU kernel, the sort implementation, a CUDA
kernel reached only through a backward formula - and the rest sampled, seeded), one
selection each, with the record beside the index. Reported per change, among the files
and tests the record holds: what the static walk selects (the file-level static
evidence), what is selected with the record, and a check made apart from the join's own
walk: every trusted recorded test that executed an op whose kernel reaches the change
(callers' native code up to the ops, by an independent breadth-first walk) is kept, and
for every module whose import ran such an op: all trusted tests of it when it is a test
file, every trusted test that entered one of its functions, and at least one trusted
test importing it (indexer/select/import_work.py says why that is enough).
Also the time of `torchtalk select` in a fresh process, first with the index to update for
the edited file (a PR job's select), then with it up to date.

Needs the tree, its index, and a record of it (bench/record.py):

    python bench/selection_record.py --source PATH --record /tmp/record-bench/record.ttr \
        [--samples 20] [--seed 6]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from selection import _cli_select, _insert_statement  # the same edit bench/selection.py makes

from indexer.query.index import Index
from indexer.query.recorded import RecordedRuns, record_path_for
from indexer.select.engine import select_tests
from indexer.select.matching import ItemMatcher
from indexer.select.model import Selection
from indexer.select.record_join import trusted_tests
from indexer.workspace import Workspace

NATIVE = "aten/src/ATen/native/"
# (qualname, file) of the named changes
NAMED = (
    ("at::native::matmul", "aten/src/ATen/native/LinearAlgebra.cpp"),
    (
        "at::native::(anonymous namespace)::sigmoid_kernel",
        "aten/src/ATen/native/cpu/UnaryOpsKernel.cpp",
    ),
    ("at::native::sort_stable_kernel", "aten/src/ATen/native/cpu/SortingKernel.cpp"),
    ("at::native::embedding_dense_backward_cuda", "aten/src/ATen/native/cuda/Embedding.cu"),
)
BACKWARD = ("calls", "launches", "dispatches", "binds", "derives")


def ops_reaching(index: Index, start: int) -> set[str]:
    """Base names of the ops whose native code reaches ``start``: breadth first over
    native edges, not past an op (its callers reach it through the dispatcher)."""
    seen, queue, ops = {start}, deque([start]), set()
    kinds = {}
    while queue:
        node = queue.popleft()
        kind = kinds.get(node) or index.node(node).kind
        if kind == "op":
            ops.add(index.node(node).qualname.split(".", 1)[0])
            continue
        if kind in ("binding",) or kind.startswith("python") or kind.startswith("test"):
            continue
        edges = [(e.src, e) for e in index.in_edges(node, BACKWARD)]
        edges += [(e.dst, e) for e in index.out_edges(node, ("implements", "derives"))]
        for other, edge in edges:
            if other in seen:
                continue
            other_kind = index.node(other).kind
            if edge.kind == "derives" and edge.src == node and other_kind != "op":
                continue
            kinds[other] = other_kind
            seen.add(other)
            queue.append(other)
    return ops


def own_work_tests(runs: RecordedRuns, names: list[tuple[str, str]]) -> set[str]:
    """Tests that executed one of ``names`` in their own setup, call or teardown, or in a
    fixture they use: not only in their file's collection or the session's start (the
    import-time work every test of a file shares)."""
    wanted = set(runs.name_ids(names))
    own = {
        index for index, segment in enumerate(runs.record.segments)
        if segment.kind in ("test", "fixture") and segment.names & wanted
    }  # fmt: skip
    return {t.nodeid for t in runs.record.tests if own.intersection(t.segments)}


def import_misses(runs: RecordedRuns, names, trusted: set[int], kept: set[str]) -> list[str]:
    """What the import rule requires and ``kept`` lacks: one line per module."""
    tests = runs.record.tests
    test_files = {t.file for t in tests}
    misses = []
    for module in sorted(runs.import_work(names)):
        if module in test_files:
            need = {tests[i].nodeid for i in trusted if tests[i].file == module}
            if need - kept:
                misses.append(f"{module}: {len(need - kept)} of its own tests")
            continue
        users = {tests[i].nodeid for i in runs.tests_executing(runs.functions_of(module))
                 if i in trusted}  # fmt: skip
        if users - kept:
            misses.append(f"{module}: {len(users - kept)} tests using it")
        importers = {tests[i].nodeid for i in runs.importers([module]) & trusted}
        if importers and not importers & kept:
            misses.append(f"{module}: none of its {len(importers)} importers")
    return misses


def static_only(selection: Selection) -> Selection:
    """The same selection as the static walk alone made it."""
    copy = Selection(selection.source, selection.harness, selection.base, selection.index)
    copy.files = {}
    for path, selected in selection.files.items():
        if selected.reasons or selected.tests is not None:
            clone = type(selected)(path, selected.reasons, selected.tests, selected.devices,
                                   selected.device_classes)  # fmt: skip
            copy.files[path] = clone
    copy.everything = list(selection.everything)
    return copy


def kept_tests(selection: Selection, tests) -> set[str]:
    matcher = ItemMatcher(selection)
    kept = set()
    for test in tests:
        parts = test.nodeid.split("::")[1:]
        if matcher.verdict(test.file, parts).keep:
            kept.add(test.nodeid)
    return kept


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--record", type=Path, required=True)
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--seed", type=int, default=6)
    args = parser.parse_args()
    source = args.source.resolve()
    dirty = subprocess.run(
        ["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    if dirty.strip():
        print(f"{source} has uncommitted changes; the bench needs a clean tree")
        return 1
    workspace = Workspace.resolve(source)
    beside = record_path_for(workspace.db_path)
    shutil.copyfile(args.record, beside)
    runs = RecordedRuns.open(beside)
    trusted, _ = trusted_tests(runs, frozenset())
    trusted_ids = {id(t) for t in trusted}
    trusted_indexes = {i for i, t in enumerate(runs.record.tests) if id(t) in trusted_ids}
    recorded_files = {t.file for t in runs.record.tests}
    print(
        f"record: {len(runs.record.tests)} tests in {len(recorded_files)} files, "
        f"{len(trusted)} trusted"
    )
    index = Index(workspace.db_path)
    rows = index.conn.execute(
        "SELECT n.id, n.qualname, f.path, n.line, n.end_line FROM nodes n"
        " JOIN files f ON f.id = n.file_id WHERE n.kind IN ('cpp_function', 'cuda_kernel')"
        " AND f.path LIKE ? AND n.end_line - n.line >= 3 ORDER BY n.id",
        (NATIVE + "%",),
    ).fetchall()
    named = [
        next(r for r in rows if r[1].endswith(suffix) and r[2] == path)
        for suffix, path in NAMED
        if any(r[1].endswith(suffix) and r[2] == path for r in rows)
    ]
    rng = random.Random(args.seed)
    rng.shuffle(rows)
    chosen = named + [r for r in rows if r not in named]
    results = []
    for node_id, qualname, rel, line, end in chosen:
        if len(results) >= args.samples:
            break
        path = source / rel
        original = _insert_statement(path, line, end)
        if original is None:
            continue
        try:
            update_s, update_report = _cli_select(source)  # the PR job's: index updated first
            cli_s, cli_report = _cli_select(source)  # once the index is up to date
            started = time.perf_counter()
            selection = select_tests(workspace)
            select_s = time.perf_counter() - started
        finally:
            path.write_bytes(original)
        if selection.run_everything:
            print(f"  {qualname}: run everything ({selection.everything[0][:90]})")
            results.append({"qualname": qualname, "everything": True})
            continue
        static = kept_tests(static_only(selection), runs.record.tests)
        with_record = kept_tests(selection, runs.record.tests)
        # Among the tests the record speaks for (the rest are the static walk's either way)
        trusted_ids_ = {t.nodeid for t in trusted}
        static_trusted, record_trusted = static & trusted_ids_, with_record & trusted_ids_
        ops = ops_reaching(index, node_id)
        names = [n for op in ops for n in runs.matching_names("op", op)]
        must = {runs.record.tests[i].nodeid for i in runs.tests_executing(names)}
        must &= {t.nodeid for t in trusted}
        missed = must - with_record
        own = own_work_tests(runs, names) & {t.nodeid for t in trusted}
        imports = runs.import_work(names)
        import_missed = import_misses(runs, names, trusted_indexes, with_record)
        result = {
            "qualname": qualname,
            "ops": len(ops),
            "static_tests": len(static),
            "record_tests": len(with_record),
            "static_files": len({n.split("::")[0] for n in static}),
            "record_files": len({n.split("::")[0] for n in with_record}),
            "static_trusted": len(static_trusted),
            "record_trusted": len(record_trusted),
            "record_trusted_files": len({n.split("::")[0] for n in record_trusted}),
            "must": len(must),
            "own": len(own),
            "missed": len(missed),
            "import_modules": len(imports),
            "import_missed": import_missed,
            "select_s": round(select_s, 2),
            "cli_s": round(cli_s, 2),
            "update_s": round(update_s, 2),
            "cli_cpu_s": round(cli_report["bench_cpu_s"], 2),
            "update_cpu_s": round(update_report["bench_cpu_s"], 2),
        }
        results.append(result)
        print(
            f"  {qualname} ({len(ops)} ops): recorded tests selected static "
            f"{len(static)}/{len(runs.record.tests)} ({result['static_files']} files) -> with "
            f"record {len(with_record)} ({result['record_files']} files); of the "
            f"{len(trusted)} trusted: static {len(static_trusted)} -> record "
            f"{len(record_trusted)} ({result['record_trusted_files']} files); executing an op "
            f"reaching it {len(must)} ({len(own)} in their own or fixture work), missed "
            f"{len(missed)}; run by the import of {len(imports)} modules, import rule missed "
            f"{len(import_missed)}{' ' + str(import_missed[:3]) if import_missed else ''}; "
            f"torchtalk select {update_s:.2f} s ({result['update_cpu_s']:.2f} s CPU) with the "
            f"index update, {cli_s:.2f} s ({result['cli_cpu_s']:.2f} s CPU) up to date",
            flush=True,
        )
    measured = [r for r in results if not r.get("everything")]
    total = len(runs.record.tests) or 1
    if measured:
        static_fraction = statistics.median(r["static_tests"] / total for r in measured)
        record_fraction = statistics.median(r["record_tests"] / total for r in measured)
        trusted_total = len(trusted) or 1
        static_trusted_fraction = statistics.median(
            r["static_trusted"] / trusted_total for r in measured
        )
        record_trusted_fraction = statistics.median(
            r["record_trusted"] / trusted_total for r in measured
        )
        print(
            f"changes: {len(results)} ({len(results) - len(measured)} run everything); median "
            f"selected fraction of recorded tests: static {static_fraction:.1%}, with the "
            f"record {record_fraction:.1%}; of the trusted tests: static "
            f"{static_trusted_fraction:.1%}, with the record {record_trusted_fraction:.1%}; "
            f"missed tests executing a reaching op: "
            f"{sum(r['missed'] for r in measured)}, import rule: "
            f"{sum(len(r['import_missed']) for r in measured)}; "
            f"torchtalk select, index up to date: median "
            f"{statistics.median(r['cli_s'] for r in measured):.2f} s, max "
            f"{max(r['cli_s'] for r in measured):.2f} s; with the update first: median "
            f"{statistics.median(r['update_s'] for r in measured):.2f} s, max "
            f"{max(r['update_s'] for r in measured):.2f} s; CPU up to date: median "
            f"{statistics.median(r['cli_cpu_s'] for r in measured):.2f} s, max "
            f"{max(r['cli_cpu_s'] for r in measured):.2f} s; with the update: median "
            f"{statistics.median(r['update_cpu_s'] for r in measured):.2f} s, max "
            f"{max(r['update_cpu_s'] for r in measured):.2f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
