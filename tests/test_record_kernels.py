"""CUDA kernels in a record: the trace parser on profiler output in the real format, the
capture's switch, and its giving way to a test that starts a profiler of its own.

No machine here has a GPU, so kernels are parsed from a chrome trace written in the
profiler's format (tests/fixtures/profiler_traces/README.md says where that format comes
from) and from a real CPU-only trace torch.profiler writes here, which has none. The
capture's session is started and stopped for real, with CPU activity standing in for
CUDA activity (which a CPU-only torch refuses).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from indexer.record.cuda_capture import KernelCapture, capture_off_reason
from indexer.record.cuda_trace import TraceError, kernel_launches, read_trace

FIXTURE = Path(__file__).parent / "fixtures" / "profiler_traces" / "cuda_matmul_backward.json"
SUM_KERNEL_PREFIX = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float"


def test_kernels_of_a_cuda_trace_with_the_op_and_call_that_launched_each() -> None:
    launches = read_trace(FIXTURE)
    by_kernel = {}
    for launch in launches:
        by_kernel.setdefault(launch.kernel, set()).add((launch.launch, launch.op))
    assert by_kernel["ampere_sgemm_128x64_nn"] == {("cudaLaunchKernel", "aten::mm")}
    assert by_kernel["ampere_sgemm_32x32_sliced1x4_tn"] == {("cudaLaunchKernel", "aten::mm")}
    assert by_kernel["triton_poi_fused_add_0"] == {("cuLaunchKernel", "")}  # outside any op
    (sum_kernel,) = [k for k in by_kernel if k.startswith(SUM_KERNEL_PREFIX)]
    assert by_kernel[sum_kernel] == {("cudaLaunchKernel", "aten::sum")}
    # the copy is not a kernel; the sgemm launched twice is one launch record
    assert len(launches) == 4
    assert not any(launch.kernel.startswith("Memcpy") for launch in launches)


def test_a_bare_event_list_is_a_trace_too() -> None:
    events = json.loads(FIXTURE.read_text())["traceEvents"]
    assert kernel_launches(events) == read_trace(FIXTURE)


def test_a_real_cpu_only_trace_has_no_kernels(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as session:
        (torch.randn(4, 4) @ torch.randn(4, 4)).sum()
    trace = tmp_path / "cpu.json"
    session.export_chrome_trace(str(trace))
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("cat") == "cpu_op" and e.get("name") == "aten::mm" for e in events)
    assert read_trace(trace) == []


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"schemaVersion": 1, "traceEvents": [', "is not JSON"),
        ('{"schemaVersion": 1}', "no traceEvents list"),
        ("[1, 2", "is not JSON"),
    ],
)
def test_what_is_not_a_trace_is_refused(tmp_path: Path, text: str, reason: str) -> None:
    trace = tmp_path / "trace.json"
    trace.write_text(text)
    with pytest.raises(TraceError, match=reason):
        read_trace(trace)


def test_the_capture_is_off_without_a_gpu_saying_why() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    assert capture_off_reason(torch) == "off: no CUDA device"
    assert capture_off_reason(None) == "off: torch is not importable"


def test_a_test_starting_its_own_profiler_runs_and_its_kernels_are_marked_incomplete() -> None:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    capture = KernelCapture(torch, activities=[ProfilerActivity.CPU])
    try:
        capture.start()
        assert torch.autograd._profiler_enabled()
        # What a profiling test does. Without the capture giving way, the test's profiler
        # would end the capture's session under it (torch 2.6: the capture's stop then
        # raises "Can't disable Kineto profiler when it's not running").
        with profile(activities=[ProfilerActivity.CPU]) as own:
            torch.ones(2).add_(1)
        assert any(e.name == "aten::add_" for e in own.events())
        launches, problems = capture.stop()
        assert launches == []
        assert problems == ["kernels after the test started its own profiler are not recorded"]
        # the next test is captured again, in full
        capture.start()
        torch.ones(2).mul(2)
        assert capture.stop() == ([], [])
    finally:
        capture.close()
    assert not torch.autograd._profiler_enabled()
    assert torch.autograd.profiler._prepare_profiler is capture._original_prepare


def test_a_test_starting_under_a_running_profiler_is_not_captured() -> None:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    capture = KernelCapture(torch, activities=[ProfilerActivity.CPU])
    try:
        with profile(activities=[ProfilerActivity.CPU]):
            capture.start()
            launches, problems = capture.stop()
    finally:
        capture.close()
    assert launches == []
    assert problems == ["kernels not recorded: a profiler was already running"]


def test_merged_shards_say_each_way_kernels_were_observed() -> None:
    from indexer.record.merge import merge
    from indexer.record.model import Record

    def shard(cuda_kernels: str, created_at: str) -> Record:
        mechanisms = {"ops": "RecordFunction global callback", "cuda_kernels": cuda_kernels}
        return Record(meta={"commit": "c1", "created_at": created_at, "mechanisms": mechanisms})

    gpu = shard("Kineto CUDA activity, a session per test", "2026-12-04T00:00:00+00:00")
    cpu = shard("off: no CUDA device", "2026-12-04T01:00:00+00:00")
    for order in ([gpu, cpu], [cpu, gpu]):
        mechanisms = merge(order).meta["mechanisms"]
        assert mechanisms["cuda_kernels"] == (
            "Kineto CUDA activity, a session per test; off: no CUDA device"
        )
        assert mechanisms["ops"] == "RecordFunction global callback"
