"""Same answers on an audit's mutations: two replays of one report (``torchtalk audit
--replay REPORT --report OUT``, by two codes) compared mutation by mutation on what they
select (files, tests kept, what they miss, run-everything reasons), not on timings.
Prints one line per mutation that differs and the totals; exits 1 when one does.

    python bench/same_replays.py /tmp/spline-before-record.json /tmp/spline-after-record.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# What a replay's result says of its selection (``indexer.audit.compare``).
FIELDS = (
    "status",
    "selected_files",
    "tests_selected",
    "missed_tests",
    "missed_files",
    "run_everything",
    "empty_reason",
    "outside_suite",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args()
    reports = [json.loads(path.read_text()) for path in (args.before, args.after)]
    if reports[0].get("replay_of") != reports[1].get("replay_of"):
        raise SystemExit("not replays of one report")
    results = [{r["id"]: r for r in report["results"]} for report in reports]
    if set(results[0]) != set(results[1]):
        raise SystemExit("the replays hold other mutations")
    differing = 0
    for mutation in sorted(results[0]):
        before, after = ({field: side[mutation].get(field) for field in FIELDS} for side in results)
        if before != after:
            differing += 1
            changed = {f: (before[f], after[f]) for f in FIELDS if before[f] != after[f]}
            print(mutation, results[0][mutation]["scope"], changed)
    built = sum(r["status"] in ("caught", "uncaught") for r in results[0].values())
    files = [sum(len(r.get("selected_files") or ()) for r in side.values()) for side in results]
    print(
        f"{len(results[0])} mutations ({built} built), {differing} with another selection;"
        f" files selected in all: {files[0]} / {files[1]}"
    )
    sys.exit(1 if differing else 0)


if __name__ == "__main__":
    main()
