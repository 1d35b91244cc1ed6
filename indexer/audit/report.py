"""The audit's report: totals over the measured mutations, as JSON and Markdown.

A mutation is *measured* when it built and at least one test (not excluded by the
baseline) failed; safety and precision are over measured mutations only. Controls and
mutations nothing catches are counted apart: a control that fails a test, or selects a
file, is named.
"""

from __future__ import annotations

import statistics

SCHEMA = "torchtalk.audit/1"


def _ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def totals(results: list[dict]) -> dict:
    measured = [r for r in results if r["status"] == "caught"]
    controls = [r for r in results if r["control"]]
    failing_files = sum(len(r["failing_files"]) for r in measured)
    selected_failing_files = sum(len(r["failing_files"]) - len(r["missed_files"]) for r in measured)
    failing_tests = sum(len(r["failing_tests"]) for r in measured)
    selected_failing_tests = sum(len(r["failing_tests"]) - len(r["missed_tests"]) for r in measured)
    ratios = [len(r["selected_files"]) / len(r["failing_files"]) for r in measured]
    everything = [r for r in measured if r["run_everything"]]
    suite_seconds = sum(
        r["suite_seconds"] for r in results if r["status"] in ("caught", "uncaught")
    )
    saved = sum(r["seconds_saved"] for r in results if r["status"] in ("caught", "uncaught"))
    uncaught = [r for r in results if r["status"] == "uncaught" and not r["control"]]
    by_status: dict[str, int] = {}
    for result in results:
        by_status[result["status"]] = by_status.get(result["status"], 0) + 1
    return {
        "mutations": len(results),
        "by_status": by_status,
        "measured": len(measured),
        "safety_files": _ratio(selected_failing_files, failing_files),
        "safety_tests": _ratio(selected_failing_tests, failing_tests),
        "failing_files": failing_files,
        "failing_files_selected": selected_failing_files,
        "failing_tests": failing_tests,
        "failing_tests_selected": selected_failing_tests,
        "unsafe_mutations": [r["id"] for r in measured if r["missed_files"] or r["missed_tests"]],
        "precision_files": _ratio(sum(len(r["selected_files"]) for r in measured), failing_files),
        "median_selected_per_failing_files": (
            round(statistics.median(ratios), 3) if ratios else None
        ),
        "run_everything": len(everything),
        "run_everything_reasons": sorted(
            {reason for r in everything for reason in r["run_everything"]}
        ),
        "uncaught": [r["id"] for r in uncaught],
        # What the selection costs in tests run: caught, and where nothing fails.
        "tests_kept": sum(r["tests_selected"] for r in measured),
        "tests_kept_uncaught": sum(r["tests_selected"] for r in uncaught),
        "naming_files_outside_suite": [r["id"] for r in results if r.get("outside_suite")],
        "controls": len(controls),
        "controls_failing_or_selecting": [
            r["id"] for r in controls if r.get("failing_tests") or r.get("selected_files")
        ],
        "suite_seconds": round(suite_seconds, 1),
        "seconds_selection_would_save": round(saved, 1),
    }


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _value(value: float | None) -> str:
    return "n/a" if value is None else str(value)  # None: no mutation was caught


def _files(paths: list[str], limit: int = 4) -> str:
    if not paths:
        return "-"
    shown = ", ".join(p.rsplit("/", 1)[-1] for p in paths[:limit])
    return shown + (f" +{len(paths) - limit}" if len(paths) > limit else "")


def _replay_note(report: dict) -> list[str]:
    if not report.get("replay_of"):
        return []
    precise = report.get("precise") or {}
    mode = precise.get("mode", "off")
    how = precise.get("database") if mode == "on" else precise.get("reason")
    record = report["config"].get("record")
    return [
        f"Replay of {report['replay_of']}: the selection run again on its mutations, the "
        f"failures as it recorded them (no build, no suite); precise mode {mode} ({how}); "
        + (f"record {record}" if record else "no record: the static index alone")
    ]


def _suite_note(report: dict) -> list[str]:
    """The suite the figures are of, and the selections that named files beyond it."""
    results = (report.get("baseline") or {}).get("results") or {}
    files = {test.split("::", 1)[0] for test in results}
    line = f"suite: {len(results)} tests in {len(files)} files, as the test command ran them"
    outside = (report.get("totals") or {}).get("naming_files_outside_suite") or []
    if outside:
        line += (
            f"; {len(outside)} selections also name test files it does not run "
            "(counted apart: `outside_suite`, neither selected nor missed)"
        )
    return [line]


def _planned(report: dict) -> str:
    """The plan's size, and why when it is short of ``--mutations``."""
    asked = report["config"]["mutations"]
    planned = len(report.get("plan") or []) or asked
    if planned >= asked:
        return f"{planned} planned mutations run"
    return (
        f"{planned} planned mutations run ({asked} asked: no more lines under --paths "
        "take a mutation)"
    )


def markdown(report: dict) -> str:
    t = report["totals"]
    config = report["config"]
    lines = [
        f"# torchtalk audit of {report['source']}",
        "",
        f"HEAD {report['head'][:12]}, harness {report['harness']}, seed {config['seed']}, "
        f"{t['mutations']} of {_planned(report)}"
        + (f" (stopped: {report['stopped']})" if report.get("stopped") else ""),
        f"build: `{config['build']}`; tests: `{config['test']}`",
        *_suite_note(report),
        *_replay_note(report),
        "",
        "| figure | value |",
        "| --- | --- |",
        f"| measured (built, caught) | {t['measured']} |",
        f"| by status | {', '.join(f'{k} {v}' for k, v in sorted(t['by_status'].items()))} |",
        f"| safety, failing test files selected | {_pct(t['safety_files'])} "
        f"({t['failing_files_selected']} of {t['failing_files']}) |",
        f"| safety, failing tests selected | {_pct(t['safety_tests'])} "
        f"({t['failing_tests_selected']} of {t['failing_tests']}) |",
        f"| precision, selected / failing test files | {_value(t['precision_files'])} |",
        f"| median selected / failing test files | "
        f"{_value(t['median_selected_per_failing_files'])} |",
        f"| run everything (measured) | {t['run_everything']} |",
        f"| tests kept, caught / uncaught mutations | {t.get('tests_kept', 'n/a')} / "
        f"{t.get('tests_kept_uncaught', 'n/a')} |",
        f"| mutations nothing catches | {len(t['uncaught'])} |",
        f"| controls failing or selecting | {len(t['controls_failing_or_selecting'])} of {t['controls']} |",
        f"| test time selection would have saved | {t['seconds_selection_would_save']} s of "
        f"{t['suite_seconds']} s |",
        "",
    ]
    if t["run_everything_reasons"]:
        lines += ["Run-everything reasons:", ""]
        lines += [f"- {reason}" for reason in t["run_everything_reasons"]] + [""]
    baseline = report.get("baseline") or {}
    if baseline.get("excluded"):
        lines += [
            f"Excluded by the baseline (failing or flaky before any mutation): "
            f"{', '.join(baseline['excluded'])}",
            "",
        ]
    lines += [
        "| id | mutation | status | failing files | selected | missed |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in report["results"]:
        selected = "everything" if r["run_everything"] else _files(r["selected_files"])
        where = f"{r['kind']} `{r['path']}:{r['line']}`"
        lines.append(
            f"| {r['id']} | {where} | {r['status']} | {_files(r['failing_files'])} | "
            f"{selected} | {_files(r['missed_files']) if r['missed_files'] else '-'} |"
        )
    return "\n".join(lines) + "\n"
