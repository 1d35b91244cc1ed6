"""Binding-chain figures on the real trees, measured in one run.

    python bench/bindings_index.py [--pytorch PATH] [--vllm PATH] [--skip-vllm]
                                   [--cache DIR] [--traces N]

For each corpus, with its index (built into --cache, default: the corpus-test cache keyed
by the indexer's code, so a fresh index is built only when the code changed):

* op nodes by source (native_functions.yaml, TORCH_LIBRARY*, RegisterOperators...),
  registrations, derivative entries, bindings by kind (pybind11 def / class / method...,
  PyMethodDef);
* resolution rate: dispatch targets (``dispatches`` refs to C++ from ops and
  registrations) resolved to a definition / all, overall and per kind of target;
  ``binds`` targets likewise; ``op`` and ``op_impl`` link statistics;
* the bindings extractors' own time on the files they read, as a share of the build's
  extraction time;
* trace latency (median and worst) over N ops.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CORPORA = Path.home() / ".cache" / "torchtalk-corpora"


def open_index(source: Path, cache: Path | None, name: str, db: Path | None = None):
    from indexer.build import build_index
    from indexer.query.index import Index
    from indexer.workspace import Workspace

    if db is not None:  # an index built elsewhere (e.g. by a previous run)
        return Workspace.resolve(source), Index(db)
    if cache is None:
        from tests.helpers import corpus_index

        os.environ.setdefault("TORCHTALK_PYTORCH_SOURCE", str(source))
        _, cache = corpus_index(name)
    os.environ["TORCHTALK_CACHE_DIR"] = str(cache)
    workspace = Workspace.resolve(source)
    if not workspace.db_path.is_file():
        build_index(workspace, show_progress=False)
    return workspace, Index(workspace.db_path)


def bindings_extraction_seconds(workspace) -> tuple[float, int]:
    """Time of the two bindings extractors alone over the files they want."""
    from indexer.bindings.registrations import RegistrationExtractor
    from indexer.bindings.yaml_extractor import RegistryYamlExtractor
    from indexer.extract.discover import discover
    from indexer.extract.source import SourceFile
    from indexer.graph.facts import FileFacts

    extractors = [
        RegistryYamlExtractor(workspace.manifest),
        RegistrationExtractor(workspace.manifest),
    ]
    spent = 0.0
    files = 0
    for entry in discover(workspace.source, workspace.manifest):
        if entry.language not in ("cpp", "cuda", "yaml"):
            continue
        data = (workspace.source / entry.path).read_bytes()
        src = SourceFile(entry.path, data, entry.language)
        started = time.perf_counter()
        wanted = [e for e in extractors if e.wants(src)]
        if wanted:
            files += 1
            facts = FileFacts(entry.path, entry.language, "", len(data))
            facts.add_node("file", entry.path, entry.path, 1, 1, None)
            for extractor in wanted:
                extractor.extract(src, facts)
        spent += time.perf_counter() - started
    return spent, files


def figures(index) -> dict:
    conn = index.conn
    ops = Counter(
        ("autogen (native_functions.yaml)" if node.attrs.get("autogen_from") else None)
        or node.attrs.get("source")
        or "?"
        for node in index.nodes_of_kind("op")
    )
    bindings = Counter(node.attrs.get("form", "?") for node in index.nodes_of_kind("binding"))
    counts = dict(conn.execute("SELECT kind, COUNT(*) FROM nodes GROUP BY kind"))
    rows = conn.execute(
        "SELECT r.kind, r.attrs, EXISTS (SELECT 1 FROM edges e WHERE e.ref_id = r.id)"
        " FROM refs r JOIN nodes n ON n.id = r.src_id"
        " WHERE r.scheme = 'cpp' AND n.kind IN ('op', 'registration', 'binding')"
        " AND r.kind IN ('dispatches', 'binds')"
    ).fetchall()
    by_role: dict[str, list[int]] = {}
    unresolved_keys: Counter[str] = Counter()
    for kind, raw, resolved in rows:
        attrs = json.loads(raw) if raw else {}
        if kind == "dispatches" and not resolved:
            unresolved_keys[str(attrs.get("key"))] += 1
        if kind == "binds":
            role = "binds (pybind11 / PyMethodDef)"
        elif attrs.get("role"):
            role = f"dispatch: {attrs['role']}"
        elif attrs.get("structured"):
            role = "dispatch: structured kernel"
        elif attrs.get("implicit"):
            role = "dispatch: implicit CompositeImplicitAutograd"
        elif attrs.get("via") == "lambda":
            role = "dispatch: lambda callee"
        else:
            role = "dispatch: kernel"
        slot = by_role.setdefault(role, [0, 0])
        slot[0] += 1
        slot[1] += resolved
    dispatch_total = sum(v[0] for k, v in by_role.items() if k.startswith("dispatch"))
    dispatch_resolved = sum(v[1] for k, v in by_role.items() if k.startswith("dispatch"))
    link = index.meta_json("link_stats", {})
    return {
        "ops": dict(ops),
        "ops_total": sum(ops.values()),
        "registrations": counts.get("registration", 0),
        "derivatives": counts.get("derivative", 0),
        "bindings": dict(bindings),
        "bindings_total": sum(bindings.values()),
        "dispatch_resolved": dispatch_resolved,
        "dispatch_total": dispatch_total,
        "by_role": by_role,
        "unresolved_keys": unresolved_keys,
        "op_link": link.get("op"),
        "op_impl_link": link.get("op_impl"),
        "extract_s": index.meta_json("timings", {}).get("extract_s"),
    }


def trace_latency(index, count: int) -> tuple[float, float, int]:
    from indexer.query.trace import trace

    ops = [node.qualname for node in index.nodes_of_kind("op")]
    sample = random.Random(7).sample(ops, min(count, len(ops)))
    times = []
    for name in sample:
        started = time.perf_counter()
        trace(index, name)
        times.append(time.perf_counter() - started)
    return statistics.median(times), max(times), len(times)


def vllm_ops(source: Path, index) -> dict[str, int]:
    """The ops of csrc/torch_bindings.cpp: how many reach a host definition, a CUDA kernel,
    and (for hosts whose launches the regex oracle of tests/test_bindings_vllm.py sees)
    every kernel launched."""
    from indexer.query.trace import trace
    from tests.test_bindings_vllm import LaunchOracle, impl_names, torch_bindings_ops

    oracle = LaunchOracle(source)
    implemented = impl_names(source)
    counts = Counter()
    for namespace, name in torch_bindings_ops(source):
        counts["defined"] += 1
        if name not in implemented:
            continue
        counts["implemented"] += 1
        answer = trace(index, f"torch.ops.{namespace}.{name}")
        ops = [op for op in answer.data.get("ops", []) if op["op"] == f"{namespace}::{name}"]
        hosts = {d["definition"] for op in ops for d in op["dispatch"] if d.get("definition")}
        kernels = {
            k["kernel"].rpartition("::")[2] for op in ops for k in op.get("cuda_kernels", [])
        }
        counts["host"] += bool(hosts)
        counts["kernel"] += bool(kernels)
        expected: set[str] = set()
        for host in hosts:
            path, _, line = host.rpartition(":")
            definition = oracle.function_at(path, int(line))
            if definition is not None:
                expected.update(oracle.launches(definition))
        if expected:
            counts["launching"] += 1
            counts["all_launches"] += expected <= kernels
    return dict(counts)


def report(name: str, source: Path, cache: Path | None, traces: int, db: Path | None) -> None:
    workspace, index = open_index(source, cache, name, db)
    data = figures(index)
    own, files = bindings_extraction_seconds(workspace)
    median, worst, sampled = trace_latency(index, traces)
    print(f"## {name} ({source})")
    print(
        f"ops: {data['ops_total']}  "
        + ", ".join(f"{k} {v}" for k, v in sorted(data["ops"].items()))
    )
    print(f"registrations (m.impl of ops defined elsewhere): {data['registrations']}")
    print(f"derivative entries: {data['derivatives']}")
    print(
        f"bindings: {data['bindings_total']}  "
        + ", ".join(f"{k} {v}" for k, v in sorted(data["bindings"].items()))
    )
    total, resolved = data["dispatch_total"], data["dispatch_resolved"]
    rate = resolved / total if total else 0.0
    print(f"dispatch targets resolved to a definition: {resolved}/{total} = {rate:.1%}")
    mps = data["unresolved_keys"].get("MPS", 0)
    if mps:
        rate = resolved / (total - mps)
        print(
            f"  without MPS targets (.mm files, not indexed): {resolved}/{total - mps} = {rate:.1%}"
        )
    top = ", ".join(f"{key} {count}" for key, count in data["unresolved_keys"].most_common(8))
    print(f"  unresolved by dispatch key: {top}")
    for role, (all_refs, ok) in sorted(data["by_role"].items()):
        print(f"  {role}: {ok}/{all_refs} = {ok / all_refs:.1%}")
    print(f"op refs: {data['op_link']}  op_impl refs: {data['op_impl_link']}")
    if data["extract_s"]:
        share = own / data["extract_s"]
        print(
            f"bindings extractors: {own:.2f} s on {files} files, "
            f"{share:.1%} of the build's extraction time ({data['extract_s']} s, parallel)"
        )
    else:
        print(f"bindings extractors: {own:.2f} s on {files} files (no build timings recorded)")
    print(
        f"trace latency over {sampled} ops: median {median * 1000:.1f} ms, worst {worst * 1000:.0f} ms"
    )
    if (source / "csrc/torch_bindings.cpp").is_file():
        ops = vllm_ops(source, index)
        print(
            f"csrc/torch_bindings.cpp: {ops.get('defined', 0)} ops defined, "
            f"{ops.get('implemented', 0)} implemented in csrc; "
            f"{ops.get('host', 0)} reach their host definition, "
            f"{ops.get('kernel', 0)} reach a CUDA kernel; of the {ops.get('launching', 0)} "
            f"whose host launches a kernel within 2 calls (regex oracle), "
            f"{ops.get('all_launches', 0)} reach every kernel launched"
        )
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pytorch", type=Path, default=CORPORA / "pytorch-2.6")
    parser.add_argument("--vllm", type=Path, default=CORPORA / "vllm-0.33.0")
    parser.add_argument("--skip-vllm", action="store_true")
    parser.add_argument("--skip-pytorch", action="store_true")
    parser.add_argument("--cache", type=Path, help="TORCHTALK_CACHE_DIR for the indexes")
    parser.add_argument("--traces", type=int, default=200)
    parser.add_argument("--pytorch-db", type=Path, help="use this index of the PyTorch tree")
    parser.add_argument("--vllm-db", type=Path, help="use this index of the vLLM tree")
    args = parser.parse_args()
    if not args.skip_pytorch:
        report("pytorch", args.pytorch, args.cache, args.traces, args.pytorch_db)
    if not args.skip_vllm:
        report("vllm", args.vllm, args.cache, args.traces, args.vllm_db)


if __name__ == "__main__":
    main()
