"""How long reading a profiler trace takes: the per-test cost the CUDA kernel capture adds
on a GPU recorder (indexer/record/cuda_trace.py), on a real trace torch.profiler writes.

Run with the torch to measure (a CPU trace: its events are what the parser walks; it
holds no kernel events, so it finds 0 launches):

    PYTHONPATH=. /work/venv-pt26/bin/python bench/record_trace_parse.py [ROUNDS]
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from indexer.record.cuda_trace import read_trace


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    with profile(activities=[ProfilerActivity.CPU]) as session:
        x = torch.randn(8, 8)
        for _ in range(rounds):
            x = (x @ x).sigmoid()
    with tempfile.TemporaryDirectory() as directory:
        trace = Path(directory) / "trace.json"
        session.export_chrome_trace(str(trace))
        events = len(json.loads(trace.read_text())["traceEvents"])
        size = trace.stat().st_size
        wall, cpu = time.perf_counter(), time.process_time()
        launches = read_trace(trace)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(
        f"torch {torch.__version__}: {events} events ({size / 1e6:.1f} MB), "
        f"{len(launches)} launches; read_trace {wall:.3f} s wall, {cpu:.3f} s CPU"
    )


if __name__ == "__main__":
    main()
