"""Server CPU per MCP question, in process: what the code controls when the machine is busy.

    python bench/mcp_query_cpu.py DB QUESTIONS [--split dev|held_out] [--corpus NAME]
                                  [--code PATH] [--tool NAME] [--profile [first|last]]

Opens the index ``DB``, loads what the server loads when idle (mcp_server.state._warm),
then asks each question of ``QUESTIONS`` (a bench/mcp_questions*.json file) three times
through the tools' query functions, timing each asking by ``time.process_time`` (CPU of
this process, which other load inflates far less than wall time). Prints the slowest
questions and p50 / p95 of the first asking and of the last. ``--code`` puts another
checkout first on the path (before/after on one index); ``--profile`` prints a cProfile
of the last askings (``--profile first``: the first), by cumulative time; ``--tool`` asks
only one tool's questions. No answer text is printed: safe on a held-out half.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("db", type=Path, help="index.sqlite")
    parser.add_argument("questions", type=Path)
    parser.add_argument("--split", choices=("dev", "held_out"))
    parser.add_argument("--corpus", help="only this corpus's questions (pytorch, vllm)")
    parser.add_argument("--code", type=Path, help="project checkout to import instead")
    parser.add_argument("--tool", help="only the questions asked with this tool (affected...)")
    parser.add_argument(
        "--profile",
        nargs="?",
        const="last",
        choices=("first", "last"),
        help="cProfile the first or the last (default) asking of each question",
    )
    args = parser.parse_args()
    sys.path.insert(0, str((args.code or ROOT).resolve()))

    from indexer.answers.affected import affected
    from indexer.query.graph import graph
    from indexer.query.index import Index
    from indexer.query.modules import modules
    from indexer.query.search import search
    from indexer.query.tests import tests
    from indexer.query.trace import trace
    from mcp_server.state import _warm

    if not args.db.is_file():
        print(f"error: no index at {args.db}", file=sys.stderr)
        return 2
    index = Index(args.db)
    started = time.perf_counter()
    _warm(index, full=True)
    print(f"warm-up {time.perf_counter() - started:.2f} s")

    def ask(question: dict) -> None:
        call = dict(question["call"]["args"])
        tool = question["call"]["tool"]
        if tool == "affected":
            funcs = call.pop("funcs")
            names = funcs.split(",") if isinstance(funcs, str) else funcs
            answer = affected(index, [name.strip() for name in names], **call)
        else:
            run, key = {
                "trace": (trace, "func"),
                "search": (search, "query"),
                "graph": (graph, "func"),
                "modules": (modules, "name"),
                "tests": (tests, "query"),
            }[tool]
            answer = run(index, call.pop(key), **call)
        answer.to_text()
        if hasattr(answer, "to_json"):  # the structured content, as the server encodes it
            answer.to_json()
        else:  # an older checkout's (--code): as its server did
            json.loads(json.dumps(answer.to_dict(), default=str))

    data = json.loads(args.questions.read_text())
    asked = [
        q for q in data["questions"]
        if (not args.split or q.get("split") == args.split)
        and (not args.corpus or q["corpus"] == args.corpus)
        and (not args.tool or q["call"]["tool"] == args.tool)
    ]  # fmt: skip
    profiler = cProfile.Profile()
    rows = []
    for question in asked:
        times = []
        for asking in range(3):
            profiled = args.profile == ("first" if asking == 0 else "last" if asking == 2 else "")
            if profiled:
                profiler.enable()
            before = time.process_time()
            ask(question)
            times.append((time.process_time() - before) * 1000)
            if profiled:
                profiler.disable()
        rows.append((times[0], times[-1], question["id"]))
    rows.sort(reverse=True)
    for first, last, name in rows[:10]:
        print(f"first {first:7.1f} ms  again {last:7.1f} ms  {name}")
    firsts = [row[0] for row in rows]
    lasts = [row[1] for row in rows]
    print(
        f"{len(rows)} questions: CPU p50 / p95 {percentile(firsts, 0.5):.1f} /"
        f" {percentile(firsts, 0.95):.1f} ms on the first asking,"
        f" {percentile(lasts, 0.5):.1f} / {percentile(lasts, 0.95):.1f} ms asked again"
    )
    if args.profile:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
