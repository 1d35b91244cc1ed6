"""MCP server figures on the PyTorch index, measured in one run, as agents see them.

    python bench/mcp_latency.py [--source PATH] [--cache-dir DIR] [--starts N] [--calls N]
                                [--only startup|tools] [--tool NAME ...] [--code PATH]
    python bench/mcp_latency.py --cold [--source PATH] --cache-dir EMPTY_DIR

Needs a built index (``torchtalk index build --source PATH`` under the same
TORCHTALK_CACHE_DIR). Every figure is taken from the client side: the SDK's own client
starts ``torchtalk mcp-serve`` over stdio, as Claude Code or Cursor would. Reports:

* the time from process start to the first answer (``get_status``) with the cached index,
  median of ``--starts`` cold starts (target < 1 s), interleaved with two floors: a bare
  ``python -c "import mcp.server.mcpserver"``, and the same import done as the server
  does it (``mcp_server.sdk``), which no server on this SDK can beat; and the server's
  CPU time by its first answer, which other load on the machine inflates less;
* per-tool latency over ``--calls`` calls of representative PyTorch queries: the first
  call (which pays one-time imports and caches) and p50/p95 of the rest (target p95
  < 50 ms), after a first ``get_status`` and a ``--settle`` pause, in which the server
  loads what it loads when idle, as it would while an agent reads its first answer. A
  tool whose query module is not in this build is listed as such. Each round trip is
  also given less the SDK client's own jsonschema validation of the answer.

``--cold`` instead starts the server on a cache directory with no index and follows the
phased build through ``get_status``: when the quick index (YAML, bindings, Python, tests)
answers, what a Python query answers meanwhile, and when the full call graph is ready.
That leaves the full index in the cache directory for the warm figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_SOURCE = Path.home() / ".cache" / "torchtalk-corpora" / "pytorch-2.6"
START_TARGET_S = 1.0
P95_TARGET_MS = 50.0
SLOW_QUERY_BUDGET_MS = 30_000.0
CALL_TIMEOUT_S = 300  # longer than any MCP client waits; a call past it is reported as such

QUERIES: list[tuple[str, dict]] = [
    ("get_status", {}),
    ("trace", {"func": "torch.matmul"}),
    ("trace", {"func": "torch.add"}),
    ("search", {"query": "addmm"}),
    ("search", {"query": "softmax", "mode": "kernels"}),
    ("graph", {"func": "at::native::matmul"}),
    ("graph", {"func": "at::native::cpublas::gemm", "mode": "callers", "depth": 2}),
    ("graph", {"func": "at::native::addmm_out_cuda_impl", "mode": "calls"}),
    ("graph", {"func": "at::native::cpublas::gemm", "mode": "impact", "depth": 3}),
    ("modules", {"name": "torch.nn.Linear"}),
    ("tests", {"query": "matmul", "limit": 20}),
    # a central kernel (the answer is a lower bound: the nearest 50 of ~880 test files),
    # a GEMM every matmul reaches, a leaf that reaches a few dozen, a Python function
    ("affected", {"funcs": ["at::native::matmul"]}),
    ("affected", {"funcs": ["at::native::cpublas::gemm"]}),
    ("affected", {"funcs": ["at::native::linalg_pinv_out"]}),
    ("affected", {"funcs": ["torch.nn.functional.softmax"]}),
]


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


# The floors: a bare import of the SDK, and the same import done the way the server does
# it (model building deferred, collector paused: mcp_server.sdk). No server on this SDK
# answers before the second, and only one that imports the SDK that way reaches it.
FLOORS = {
    "plain": "import mcp.server.mcpserver",
    "as the server": "from mcp_server.sdk import preload, start_up\nwith start_up(): preload()",
}


def machine_now() -> str:
    """UTC time and load average, which every figure of a shared machine needs beside it."""
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    return f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC, load average {load}"


def timed_import(code: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    return time.perf_counter() - started


def process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) a live process has used; None off Linux."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_pid(command: str) -> int | None:
    """The server process this benchmark started (a child running ``command``)."""
    me = str(os.getpid())
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if stat[1] == me and command in (entry / "cmdline").read_bytes().decode():
                return int(entry.name)
        except (OSError, ValueError, IndexError):
            continue
    return None


WARM_WAIT_S = 120.0  # the longest wait for it; also what a server that does not say is given
WARM_POLL_S = 2.0  # get_status interval while waiting for the server's warm-up


def compile_validators(client) -> None:
    """Compile the client's output-schema validator of every tool the first get_status
    listed: the Python SDK compiles one on a tool's first answer (~60x a validation, tens
    of milliseconds at load), a cost of this client's session, once per tool, that would
    land on whichever question asks that tool first."""
    session = client.session
    schemas = getattr(session, "_tool_output_schemas", {})
    compile_one = getattr(session, "_output_schema_validator", None)
    if compile_one is None:
        return
    for name, schema in schemas.items():
        if schema is not None:
            compile_one(name, schema)


async def settle(client, settle_s: float, warm_wait_s: float) -> float:
    """One get_status (and the client's validators compiled), a ``settle_s`` pause (an
    agent reading it), then until the server says its lookup tables are loaded
    (get_status ``warmed``; at most ``warm_wait_s``): on a loaded machine the idle warm-up
    takes tens of seconds, and questions asked during it time the warm-up, not their own
    work. A server that does not say (older code) is given ``warm_wait_s``. Returns the
    seconds waited in all."""
    started = time.perf_counter()
    result = await client.call_tool("get_status", {})
    compile_validators(client)
    await anyio_sleep(settle_s)
    if "warmed" not in (result.structured_content or {}).get("data", {}):
        await anyio_sleep(max(0.0, warm_wait_s - settle_s))
        return time.perf_counter() - started
    while time.perf_counter() - started < warm_wait_s:
        result = await client.call_tool("get_status", {})
        data = (result.structured_content or {}).get("data", {})
        if data.get("warmed") or data.get("warm_failed"):  # loaded, or said what failed
            break
        await anyio_sleep(WARM_POLL_S)
    return time.perf_counter() - started


async def first_answer(params) -> tuple[float, float, float | None]:
    """Seconds from process start to initialized and to the first answer, and the CPU
    seconds the server had used by then (robust to other load on the machine)."""
    from mcp.client import Client

    started = time.perf_counter()
    async with Client(params, read_timeout_seconds=120) as client:
        connected = time.perf_counter()
        result = await client.call_tool("get_status", {})
        answered = time.perf_counter()
        pid = server_pid("mcp-serve")
        cpu = process_cpu(pid) if pid else None
        if result.is_error:
            raise SystemExit(f"get_status failed: {result.content[0].text}")
        if not result.structured_content["data"]["ready"]:
            raise SystemExit("the index is not complete: build it first (see --help)")
    return connected - started, answered - started, cpu


async def tool_latency(
    params, calls: int, queries: list[tuple[str, dict]], settle_s: float, warm_wait_s: float
) -> list[tuple[str, dict, str, float, list[float], list[float], float | None]]:
    """Per query: status, the first call's ms, the other calls' ms, and of each of those
    the ms the client itself spent validating the answer against the tool's output
    schema (the Python SDK does it with jsonschema, in pure Python); and the server's CPU
    ms per call over the calls after the first (the process's clock ticks are 10 ms:
    a mean over the calls, which other load inflates less than wall time)."""
    from mcp.client import Client
    from mcp.shared.exceptions import MCPError

    rows = []
    async with Client(params, read_timeout_seconds=CALL_TIMEOUT_S) as client:
        validating = [0.0]
        validate = client.session.validate_tool_result

        async def timed_validate(*args, **kwargs):
            started = time.perf_counter()
            try:
                return await validate(*args, **kwargs)
            finally:
                validating[0] += time.perf_counter() - started

        client.session.validate_tool_result = timed_validate
        pid = server_pid("mcp-serve")
        if settle_s:
            # An agent reads the first answer before asking more: the server uses the
            # pause to load the name list and the edges in memory (mcp_server.state).
            waited = await settle(client, settle_s, warm_wait_s)
            print(f"server warm after {waited:.1f} s")
        for name, arguments in queries:
            samples = []
            validation = []
            status = "ok"
            cpu_after_first = None
            for _ in range(calls):
                enough = 1 if samples and samples[0] > SLOW_QUERY_BUDGET_MS else 3
                if len(samples) >= enough and sum(samples) > SLOW_QUERY_BUDGET_MS:
                    break  # a query this slow is measured by a few calls (one past 30 s)
                started = time.perf_counter()
                validating[0] = 0.0
                try:
                    result = await client.call_tool(name, arguments)
                except MCPError as exc:  # a timeout: the other figures still count
                    status = f"error after {time.perf_counter() - started:.0f} s: {exc}"
                    samples.append((time.perf_counter() - started) * 1000)
                    break
                samples.append((time.perf_counter() - started) * 1000)
                validation.append(validating[0] * 1000)
                if cpu_after_first is None and pid:
                    cpu_after_first = process_cpu(pid)
                if result.is_error:
                    text = result.content[0].text
                    status = "n/a: " + text[:70] if "not available" in text else "error: " + text
                    break
            cpu_now = process_cpu(pid) if pid else None
            cpu_ms = None
            if cpu_now is not None and cpu_after_first is not None and len(samples) > 1:
                cpu_ms = (cpu_now - cpu_after_first) * 1000 / (len(samples) - 1)
            rows.append((name, arguments, status, samples[0], samples[1:], validation[1:], cpu_ms))
    return rows


async def cold(params, poll_s: float) -> None:
    from mcp.client import Client

    started = time.perf_counter()
    async with Client(params, read_timeout_seconds=3600) as client:
        print(f"  {time.perf_counter() - started:8.1f} s  initialized")
        shown = None
        quick_seen = False
        while True:
            result = await client.call_tool("get_status", {})
            data = result.structured_content["data"]
            now = time.perf_counter() - started
            line = f"{data['serving']}: {data['progress_text']}"
            if line != shown:
                print(f"  {now:8.1f} s  {line}", flush=True)
                shown = line
            if data["serving"] == "quick" and not quick_seen:
                quick_seen = True
                for name, arguments in (
                    ("modules", {"name": "torch.nn.Linear"}),
                    ("trace", {"func": "torch.matmul"}),
                    ("graph", {"func": "at::native::matmul"}),
                ):
                    asked = time.perf_counter()
                    answer = await client.call_tool(name, arguments)
                    took = (time.perf_counter() - asked) * 1000
                    text = answer.content[0].text
                    print(f"  {now:8.1f} s  {name}{arguments} answered in {took:.0f} ms:")
                    for answer_line in [*text.splitlines()[:3], *text.splitlines()[-1:]]:
                        print(f"             | {answer_line[:110]}")
            if data["ready"] or data["error"]:
                break
            await anyio_sleep(poll_s)
        print("  phases (seconds since the server started):")
        for phase in data["phases"]:
            print(f"    {phase['at_s']:8.1f}  {phase['build']} {phase['step']}")
        if data["error"]:
            raise SystemExit(f"build failed: {data['error']}")


async def anyio_sleep(seconds: float) -> None:
    import anyio

    await anyio.sleep(seconds)


def start_up(params, starts: int) -> None:
    """Cold starts interleaved with the floors' imports, so load hits them alike."""
    import anyio

    floors: dict[str, list[float]] = {name: [] for name in FLOORS}
    runs = []
    for _ in range(starts):
        for name, code in FLOORS.items():
            floors[name].append(timed_import(code))
        runs.append(anyio.run(first_answer, params))
    median = statistics.median
    first = [run[1] for run in runs]
    cpu = [run[2] for run in runs if run[2] is not None]
    print(f"\nstart-up, median of {starts} cold starts (min-max), floors interleaved:")
    for name, times in floors.items():
        print(
            f"  floor: SDK import, {name:14} {median(times):6.3f} s  ({min(times):.3f}-{max(times):.3f})"
        )
    print(f"  process start -> initialized       {median(run[0] for run in runs):6.3f} s")
    print(
        f"  process start -> first answer      {median(first):6.3f} s  ({min(first):.3f}-{max(first):.3f})"
    )
    if cpu:
        print(f"  server CPU by the first answer     {median(cpu):6.3f} s")
    plain, fast = median(floors["plain"]), median(floors["as the server"])
    print(
        f"  ratio to the 1 s target: {median(first) / START_TARGET_S:.2f}; to the plain SDK "
        f"import: {median(first) / plain:.2f}; to the SDK imported as the server does: "
        f"{median(first) / fast:.2f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--cache-dir", help="TORCHTALK_CACHE_DIR holding the built index")
    parser.add_argument("--starts", type=int, default=7, help="cold starts to time")
    parser.add_argument("--calls", type=int, default=30, help="calls per query")
    parser.add_argument("--cold", action="store_true", help="follow a build from no index")
    parser.add_argument("--poll", type=float, default=5.0, help="--cold: get_status interval")
    parser.add_argument("--only", choices=("startup", "tools"), help="measure one part only")
    parser.add_argument(
        "--settle",
        type=float,
        default=3.0,
        help="seconds idle after the first answer, as an agent reading it (0: none)",
    )
    parser.add_argument(
        "--warm-wait",
        type=float,
        default=WARM_WAIT_S,
        help="most seconds to wait for the server's idle warm-up after --settle (0: none)",
    )
    parser.add_argument(
        "--tool", action="append", help="per-tool latency of this tool's queries only (repeat)"
    )
    parser.add_argument(
        "--code",
        type=Path,
        help="serve with the project code at this path first on the server's PYTHONPATH (a"
        " `git archive` of another commit): before/after pairs from one venv, one index",
    )
    args = parser.parse_args()
    if args.cache_dir:
        os.environ["TORCHTALK_CACHE_DIR"] = args.cache_dir

    import anyio
    from mcp.client.stdio import StdioServerParameters

    from indexer.workspace import Workspace

    workspace = Workspace.resolve(args.source)
    script = Path(sys.executable).with_name("torchtalk")
    env = {
        k: os.environ[k] for k in ("TORCHTALK_CACHE_DIR", "TORCHTALK_CONFIG_DIR") if k in os.environ
    }
    if args.code:
        env["PYTHONPATH"] = str(args.code.resolve())
    params = StdioServerParameters(
        command=str(script), args=["mcp-serve", "--source", str(args.source)], env=env
    )
    if args.cold:
        if not args.cache_dir or workspace.db_path.exists():
            print(
                "--cold needs --cache-dir pointing at a cache without this index", file=sys.stderr
            )
            return 2
        print(f"cold start on {args.source}: {os.cpu_count()} cores")
        anyio.run(cold, params, args.poll)
        return 0
    if not workspace.db_path.is_file():
        print(
            f"no index at {workspace.db_path}; build it first: TORCHTALK_CACHE_DIR="
            f"{os.environ.get('TORCHTALK_CACHE_DIR', '<default>')} torchtalk index build "
            f"--source {args.source}",
            file=sys.stderr,
        )
        return 1
    size_mb = workspace.db_path.stat().st_size / 1e6
    print(f"index: {workspace.db_path} ({size_mb:.0f} MB); {os.cpu_count()} cores")
    print(f"code served: {args.code.resolve() if args.code else ROOT}; {machine_now()}")

    if args.only in (None, "startup"):
        start_up(params, args.starts)
    if args.only == "startup":
        return 0
    queries = [query for query in QUERIES if not args.tool or query[0] in args.tool]
    rows = anyio.run(tool_latency, params, args.calls, queries, args.settle, args.warm_wait)
    print(f"\ndone: {machine_now()}")
    print(f"\nper-tool latency, client side, {args.calls} calls each (fewer if slow; ms),")
    print(
        f"after one get_status, a {args.settle:g} s pause (--settle) and the server's warm-up"
        f" (at most {args.warm_wait:g} s, --warm-wait):"
    )
    print("  round trip as the SDK's client sees it; 'served': the same less the client's own")
    print("  jsonschema validation of the answer (compiled validators, as in TypeScript")
    print("  clients, take microseconds)")
    print(
        f"  {'query':58} {'first':>7} {'p50':>7} {'p95':>7} {'served p95':>10}  p95/target"
        "  served/target  server cpu/call"
    )
    worst = worst_served = 0.0
    for name, arguments, status, first_ms, rest, validation, cpu_ms in rows:
        label = f"{name}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})"[:58]
        if status != "ok":
            print(f"  {label:58} {status}")
            continue
        if not rest:
            print(
                f"  {label:58} {first_ms:7.1f} {'(one call)':>15}  {first_ms / P95_TARGET_MS:5.0f}"
            )
            continue
        served = [total - own for total, own in zip(rest, validation, strict=True)]
        p50, p95, served_p95 = (
            percentile(rest, 0.5),
            percentile(rest, 0.95),
            percentile(served, 0.95),
        )
        worst, worst_served = max(worst, p95), max(worst_served, served_p95)
        cpu = f"{cpu_ms:15.1f}" if cpu_ms is not None else f"{'?':>15}"
        print(
            f"  {label:58} {first_ms:7.1f} {p50:7.1f} {p95:7.1f} {served_p95:10.1f}"
            f"  {p95 / P95_TARGET_MS:10.2f}  {served_p95 / P95_TARGET_MS:13.2f}  {cpu}"
        )
    measured = [(rest, v) for _, _, status, _, rest, v, _ in rows if status == "ok" and rest]
    met = sum(1 for rest, _ in measured if percentile(rest, 0.95) <= P95_TARGET_MS)
    met_served = sum(
        1
        for rest, v in measured
        if percentile([t - o for t, o in zip(rest, v, strict=True)], 0.95) <= P95_TARGET_MS
    )
    print(
        f"\n{met} of {len(rows)} queries meet p95 < 50 ms round trip, {met_served} served;"
        f" worst p95 {worst:.1f} ms round trip ({worst / P95_TARGET_MS:.2f} x target),"
        f" {worst_served:.1f} ms served ({worst_served / P95_TARGET_MS:.2f} x target)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
