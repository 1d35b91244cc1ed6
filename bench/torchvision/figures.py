"""The figures table of docs/audit.md's "torchvision 0.21" from audit and replay reports.

Usage: python bench/torchvision/figures.py LABEL=REPORT.json [LABEL=REPORT.json ...]
Prints one Markdown table, a column per report, every figure read from its totals.
"""

from __future__ import annotations

import json
import sys


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}% ({part} of {whole})" if whole else f"n/a (0 of {whole})"


def column(report: dict) -> list[str]:
    t = report["totals"]
    planned = report["config"]["mutations"]
    built = sum(n for status, n in t["by_status"].items() if status != "not building")
    controls_clean = t["controls"] - len(t["controls_failing_or_selecting"])
    median = t["median_selected_per_failing_files"]
    return [
        f"{t['mutations']} of {planned}",
        str(built),
        str(t["measured"]),
        ", ".join(f"{k} {v}" for k, v in sorted(t["by_status"].items())),
        _pct(t["failing_files_selected"], t["failing_files"]),
        _pct(t["failing_tests_selected"], t["failing_tests"]),
        "n/a" if median is None else f"{median:g}",
        "n/a" if t["precision_files"] is None else f"{t['precision_files']:g}",
        str(t["run_everything"]),
        f"{t['tests_kept']} / {t['tests_kept_uncaught']}",
        ", ".join(t["uncaught"]) or "-",
        f"{controls_clean} of {t['controls']}",
        f"{t['seconds_selection_would_save']:.0f} s of {t['suite_seconds']:.0f} s",
    ]


ROWS = [
    "mutations run, of planned",
    "built",
    "measured (built, caught)",
    "by status",
    "safety, failing test files kept",
    "safety, failing tests kept",
    "median selected / failing files",
    "selected / failing files, summed",
    "run everything (measured)",
    "tests kept, caught / uncaught mutations",
    "uncaught, controls apart",
    "controls clean (fail nothing, select nothing)",
    "test time the selection would skip",
]


def main(argv: list[str]) -> int:
    labels, columns = [], []
    for arg in argv:
        label, _, path = arg.partition("=")
        with open(path, encoding="utf-8") as handle:
            columns.append(column(json.load(handle)))
        labels.append(label)
    print("| figure | " + " | ".join(labels) + " |")
    print("| --- |" + " --- |" * len(labels))
    for i, row in enumerate(ROWS):
        print(f"| {row} | " + " | ".join(c[i] for c in columns) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
