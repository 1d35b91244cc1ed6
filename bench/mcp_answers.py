"""Are the MCP answers right on the first call? The question set of bench/mcp_questions.json.

    python bench/mcp_answers.py [--pytorch PATH] [--vllm PATH] [--cache-dir DIR]
                                [--only ID_PREFIX] [--repeat N] [--show]
                                [--questions FILE] [--split dev|held_out] [--json FILE]
                                [--code PATH]

Each question (an agent's question about PyTorch 2.6 or vLLM internals, with the true
answer read from the source as file:line) is asked with the one call an agent would make,
through the SDK's own client and ``torchtalk mcp-serve --source PATH`` over stdio, as
Claude Code or Cursor would. An answer is correct when its text (what the model reads)
names every expected location: a ``file:line`` within the set's tolerance of the one
given, or a word (``cuBLAS``). Reports per question and per kind, then the figures
docs/performance.md keeps: first-call correct (target >= 95%), median answer length
(target <= 2,000 characters) and p95 latency (target < 50 ms; the first asking of each
question, after one get_status and a pause in which the server loads what it loads when
idle (until get_status says ``warmed``, at most ``--warm-wait`` s), and over
``--repeat`` further askings; also "served": less the SDK client's own
jsonschema validation of the answer, as bench/mcp_latency.py reports it).

``--questions bench/mcp_questions_generated.json --split dev`` asks the generated set
(bench/mcp_question_gen.py) instead: ``dev`` while fixing, ``held_out`` only to report.

Needs built indexes (``torchtalk index build --source PATH`` under the same
TORCHTALK_CACHE_DIR); a corpus with none is skipped with the command that builds it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

QUESTIONS = Path(__file__).with_name("mcp_questions.json")
CORPORA = {
    "pytorch": Path.home() / ".cache" / "torchtalk-corpora" / "pytorch-2.6",
    "vllm": Path.home() / ".cache" / "torchtalk-corpora" / "vllm-0.33.0",
}
CORRECT_TARGET = 0.95
LENGTH_TARGET = 2000
P95_TARGET_MS = 50.0
SETTLE_S = 3.0
WARM_WAIT_S = 120.0  # bench/mcp_latency.py's: the longest wait for the server's warm-up
_LOCATION = re.compile(r"([\w./+-]+\.\w+):(\d+)")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def named(text: str, expected: str, tolerance: int) -> bool:
    """Whether the answer's text names ``expected``: a file:line (within ``tolerance``
    lines) or a word."""
    match = _LOCATION.fullmatch(expected)
    if match is None:  # a whole name: torch.amax is not named by torch.amax_out
        return re.search(rf"(?<![\w.]){re.escape(expected)}(?![\w])", text) is not None
    path, line = match.group(1), int(match.group(2))
    return any(
        found.group(1) == path and abs(int(found.group(2)) - line) <= tolerance
        for found in _LOCATION.finditer(text)
    )


def score(text: str, expect: list[list[str]], tolerance: int) -> list[bool]:
    """Per expected group: whether one of its alternatives is named."""
    return [any(named(text, option, tolerance) for option in group) for group in expect]


async def ask_all(
    params, questions: list[dict], repeat: int, warm_wait_s: float = WARM_WAIT_S
) -> list[dict]:
    from mcp.client import Client
    from mcp_latency import settle  # bench/, beside this script

    results = []
    async with Client(params, read_timeout_seconds=300) as client:
        # The SDK's client validates each answer against the tool's output schema in pure
        # Python (jsonschema); timed apart, as bench/mcp_latency.py does ("served").
        validating = [0.0]
        validate = client.session.validate_tool_result

        async def timed_validate(*args, **kwargs):
            started = time.perf_counter()
            try:
                return await validate(*args, **kwargs)
            finally:
                validating[0] += time.perf_counter() - started

        client.session.validate_tool_result = timed_validate
        waited = await settle(client, SETTLE_S, warm_wait_s)
        print(f"server warm after {waited:.1f} s")

        async def timed(call: dict) -> tuple[object, float, float]:
            validating[0] = 0.0
            started = time.perf_counter()
            result = await client.call_tool(call["tool"], call["args"])
            total = (time.perf_counter() - started) * 1000
            return result, total, total - validating[0] * 1000

        for question in questions:
            call = question["call"]
            result, first_ms, first_served = await timed(call)
            text = result.content[0].text if result.content else ""
            again = []
            for _ in range(repeat):
                again.append((await timed(call))[1])
            results.append(
                {
                    **question,
                    "text": text,
                    "error": result.is_error,
                    "ms": first_ms,
                    "served_ms": first_served,
                    "again": again,
                }
            )
    return results


async def anyio_sleep(seconds: float) -> None:
    import anyio

    await anyio.sleep(seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pytorch", type=Path, default=CORPORA["pytorch"])
    parser.add_argument("--vllm", type=Path, default=CORPORA["vllm"])
    parser.add_argument("--cache-dir", help="TORCHTALK_CACHE_DIR holding the built indexes")
    parser.add_argument("--only", help="ask only questions whose id starts with this")
    parser.add_argument("--repeat", type=int, default=2, help="further askings for latency")
    parser.add_argument("--show", action="store_true", help="print every answer's text")
    parser.add_argument("--questions", type=Path, default=QUESTIONS, help="question set")
    parser.add_argument("--split", choices=("dev", "held_out"), help="ask only this half")
    parser.add_argument("--quiet", action="store_true", help="print only the totals")
    parser.add_argument("--json", type=Path, help="write every result (with its text) here")
    parser.add_argument(
        "--warm-wait",
        type=float,
        default=WARM_WAIT_S,
        help="most seconds to wait for the server's idle warm-up before the first question",
    )
    parser.add_argument(
        "--code",
        type=Path,
        help="serve with the project code at this path first on the server's PYTHONPATH (a"
        " checkout of another commit, e.g. the branch before its fixes), as mcp_latency.py",
    )
    args = parser.parse_args()
    if args.cache_dir:
        os.environ["TORCHTALK_CACHE_DIR"] = args.cache_dir

    import anyio
    from mcp.client.stdio import StdioServerParameters
    from mcp_latency import machine_now  # bench/, beside this script

    from indexer.workspace import Workspace

    data = json.loads(args.questions.read_text())
    tolerance = int(data["tolerance"])
    questions = [
        q for q in data["questions"]
        if (not args.only or q["id"].startswith(args.only))
        and (not args.split or q.get("split") == args.split)
    ]  # fmt: skip
    script = Path(sys.executable).with_name("torchtalk")
    env = {
        k: os.environ[k] for k in ("TORCHTALK_CACHE_DIR", "TORCHTALK_CONFIG_DIR") if k in os.environ
    }
    if args.code:
        env["PYTHONPATH"] = str(args.code.resolve())
    results: list[dict] = []
    print(f"started {machine_now()}")
    for corpus, source in (("pytorch", args.pytorch), ("vllm", args.vllm)):
        asked = [q for q in questions if q["corpus"] == corpus]
        if not asked:
            continue
        if not Workspace.resolve(source).db_path.is_file():
            print(f"{corpus}: no index; build it: torchtalk index build --source {source}")
            continue
        params = StdioServerParameters(
            command=str(script), args=["mcp-serve", "--source", str(source)], env=env
        )
        results.extend(anyio.run(ask_all, params, asked, args.repeat, args.warm_wait))

    by_kind: dict[str, list[bool]] = {}
    print(f"{'question':40} {'ok':>3} {'chars':>6} {'first ms':>9} {'again ms':>9}  missing")
    for result in results:
        hits = score(result["text"], result["expect"], tolerance)
        result["correct"] = all(hits) and not result["error"]
        by_kind.setdefault(f"{result['corpus']} {result['kind']}", []).append(result["correct"])
        missing = [group[0] for group, hit in zip(result["expect"], hits, strict=True) if not hit]
        again = statistics.median(result["again"]) if result["again"] else float("nan")
        mark = "yes" if result["correct"] else "NO"
        if args.quiet:
            continue
        print(
            f"{result['id']:40} {mark:>3} {len(result['text']):6d} {result['ms']:9.1f}"
            f" {again:9.1f}  {', '.join(missing)}"
        )
        if args.show:
            print("    | " + result["text"].replace("\n", "\n    | "))
    if not results:
        return 1
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    if not args.quiet:
        print("\nby kind:")
    for kind, marks in sorted(by_kind.items()):
        if not args.quiet:
            print(f"  {kind:24} {sum(marks)}/{len(marks)}")
    correct = sum(result["correct"] for result in results) / len(results)
    lengths = [len(result["text"]) for result in results]
    first = [result["ms"] for result in results]
    served = [result["served_ms"] for result in results]
    again = [ms for result in results for ms in result["again"]]
    print(
        f"\n{len(results)} questions: first-call correct {correct:.0%} (target >= "
        f"{CORRECT_TARGET:.0%}); median answer {statistics.median(lengths):.0f} characters,"
        f" max {max(lengths)} (target median <= {LENGTH_TARGET}); latency p50 / p95"
        f" {percentile(first, 0.5):.1f} / {percentile(first, 0.95):.1f} ms on the first"
        f" asking"
        + (
            f", {percentile(again, 0.5):.1f} / {percentile(again, 0.95):.1f} ms asked again"
            if again
            else ""
        )
        + f" (target p95 < {P95_TARGET_MS:.0f} ms); served (less the client's own"
        f" validation of the answer) p50 / p95 {percentile(served, 0.5):.1f} /"
        f" {percentile(served, 0.95):.1f} ms on the first asking"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
