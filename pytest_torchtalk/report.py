"""The selection as JSON (schema ``torchtalk.selection/2``, see docs/selection.md), as
text for a terminal, and as a Markdown table for a CI job summary.

The report grows with what is selected and what a reader needs, not with the tests the
record decides: per file, counts and the reasons (a chain per reason the record's tests
share, not per test); the tests themselves where the record narrows a file, or with
``tests=True`` (what pytest-xdist's workers are handed, ``--tests``)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from indexer.graph.vocabulary import Extractor
from indexer.select.model import (
    EXECUTED,
    IMPORT_WORK,
    IMPORTED,
    USES,
    WITNESS,
    ChangedFile,
    Entity,
    Hop,
    Reason,
    RecordedGroup,
    SelectedFile,
    Selection,
    TestScope,
)
from indexer.wording import plural

SCHEMA = "torchtalk.selection/2"


def selection_to_dict(
    selection: Selection, counts: dict[str, int] | None = None, tests: bool = False
) -> dict:
    """The report. ``counts`` adds what only a test run knows (collected/deselected items);
    ``tests`` lists every test the record decides and selects, in every file (else only
    in the files it narrows)."""
    data: dict[str, Any] = {
        "schema": SCHEMA,
        "per_test_lists": tests,
        "source": selection.source,
        "harness": selection.harness,
        "base": selection.base,
        "index": selection.index,
        "run_everything": selection.run_everything,
        "run_everything_reasons": list(selection.everything),
        "empty_reason": selection.empty_reason,
        "changed_files": [asdict(change) for change in selection.changed_files],
        "changed_entities": [
            {k: v for k, v in asdict(entity).items() if k not in ("node_ids", "node_count")}
            | {"nodes": entity.nodes}
            for entity in selection.entities
        ],
        # A file is selected when a test of it runs; those the static walk reaches whose
        # every recorded test the record decides, selecting none, are listed apart.
        "selected": [selected_to_dict(selected, tests) for selected in selection.running],
        "decided_nothing_to_run": [selected_to_dict(f, tests) for f in selection.nothing_to_run],
        "counts": {
            "changed_files": len(selection.changed_files),
            "changed_entities": len(selection.entities),
            "test_files_total": selection.test_files_total,
            "test_files_selected": files_selected(selection),
            "test_files_decided_nothing_to_run": (
                0 if selection.run_everything else len(selection.nothing_to_run)
            ),
            "test_files_narrowed": sum(
                1 for f in selection.running if f.tests is not None or f.devices
            ),
            **(counts or {}),
        },
        "notes": list(selection.notes),
        "timings": {k: round(v, 4) for k, v in selection.timings.items()},
        "record": dict(selection.record),
    }
    data["counts"]["tests_selected_by_record"] = sum(
        f.recorded_count for f in selection.files.values()
    )
    return data


def files_selected(selection: Selection) -> int:
    """How many test files run a test."""
    return selection.test_files_total if selection.run_everything else len(selection.running)


def selected_to_dict(selected: SelectedFile, tests: bool = False) -> dict[str, Any]:
    """One file of the report, written out (asdict's recursive deep copy of ~900 files'
    chains took 0.1 s of a selection). ``tests``: name every decided and selected test;
    else only the selected ones of a file the record narrows."""
    listed = tests or selected.narrowed_by_record
    data = {
        "path": selected.path,
        "reasons": [_reason_to_dict(reason) for reason in selected.reasons],
        "tests": None if selected.tests is None else [asdict(t) for t in selected.tests],
        "devices": None if selected.devices is None else list(selected.devices),
        "device_classes": list(selected.device_classes),
        "static_for": selected.static_for,
        # the record's reasons, each with the tests it selected (their chain's last hop
        # names no test: each of them); the tests named where listed, else counted
        "record_reasons": [
            {
                **_reason_to_dict(group.reason),
                "tests": len(group.tests),
                "test_ids": list(group.tests) if listed else None,
            }
            for group in selected.recorded_groups
        ],
        "decided_by_record": len(selected.decided),
        "undecided_by_record": selected.undecided,
        # tests that run: chosen by the record, and kept by the static evidence among the
        # tests the record holds (null: it holds none, every test the evidence keeps runs)
        "tests_run": {
            "by_record": selected.recorded_count,
            "by_static": selected.tests_run_by_static,
        },
        "runs": selected.runs,
    }
    if tests:
        data["decided_by_record_tests"] = sorted(selected.decided)
    return data


def _reason_to_dict(reason: Reason) -> dict[str, Any]:
    return {
        "entity": reason.entity,
        "evidence": reason.evidence,
        "chain": [dict(vars(hop)) for hop in reason.chain],
        "note": reason.note,
        "decided_by": reason.source,
    }


def _reason_from_dict(raw: dict) -> Reason:
    chain = [Hop(**hop) for hop in raw["chain"]]
    return Reason(
        raw["entity"], raw["evidence"], chain, raw["note"], raw.get("decided_by", "static")
    )


def selection_from_dict(data: dict) -> Selection:
    """Rebuild a Selection from :func:`selection_to_dict` output written with ``tests``
    (for xdist workers: a verdict needs the names of the tests the record decides)."""
    if data.get("schema") != SCHEMA:
        raise ValueError(f"not a {SCHEMA} report: {data.get('schema')!r}")
    if not data.get("per_test_lists"):
        raise ValueError("a report without per-test lists cannot be rebuilt (write it with them)")
    selection = Selection(data["source"], data["harness"], data["base"], data["index"])
    selection.changed_files = [ChangedFile(**change) for change in data["changed_files"]]
    selection.entities = [
        Entity(**{k: v for k, v in e.items() if k != "nodes"}, node_count=e["nodes"])
        for e in data["changed_entities"]
    ]
    selection.everything = list(data["run_everything_reasons"])
    for raw in [*data["selected"], *data.get("decided_nothing_to_run", ())]:
        selected = SelectedFile(
            raw["path"],
            [_reason_from_dict(r) for r in raw["reasons"]],
            None if raw["tests"] is None else [TestScope(**t) for t in raw["tests"]],
            raw["devices"],
            list(raw.get("device_classes") or []),
            raw.get("static_for", "all"),
            set(raw.get("decided_by_record_tests") or ()),
            [
                RecordedGroup(_reason_from_dict(group), list(group["test_ids"]))
                for group in raw.get("record_reasons") or ()
            ],
            int(raw.get("undecided_by_record") or 0),
        )
        selection.files[selected.path] = selected
    selection.files = dict(sorted(selection.files.items()))
    selection.test_files_total = data["counts"]["test_files_total"]
    selection.notes = list(data["notes"])
    selection.timings = dict(data.get("timings", {}))
    selection.record = dict(data.get("record") or {})
    return selection


_IMPORT_ROLES = {
    IMPORTED: "imported by its own test {test}",
    USES: "used by {test}, which entered {at}",
    WITNESS: "imported by {test}, one importer standing for all",
}


def chain_text(reason: Reason, tests: str = "the tests") -> str:
    """``matmul changed @ L.cpp:10 <- calls _matmul_impl @ L.cpp:40 <- ...``; ``tests``
    names the tests of a chain shared by several (``RecordedGroup``: its last hop names
    none)."""
    if not reason.chain:
        return reason.note or f"{reason.entity} changed @ {reason.evidence}"
    parts = [f"{reason.entity} changed @ {reason.evidence}"]
    for hop in reason.chain:
        if hop.kind == EXECUTED:  # the record's hop: a test ran the op
            parts.append(f"{hop.dst_kind} {hop.dst} @ {hop.evidence}")
            parts.append(f"executed by {hop.src or tests} ({reason.note})")
            continue
        if hop.kind == IMPORT_WORK:
            parts.append(f"{hop.dst_kind} {hop.dst} @ {hop.evidence}")
            parts.append(f"run by the import of {hop.src}")
            continue
        if hop.kind in _IMPORT_ROLES:
            role = _IMPORT_ROLES[hop.kind].format(test=hop.src or tests, at=hop.evidence)
            parts.append(f"{role} ({reason.note})")
            continue
        src, dst = hop.src, hop.dst
        if src == dst:  # 'derivative aten::mm derives op aten::mm'
            src, dst = f"{hop.src_kind} {src}".strip(), f"{hop.dst_kind} {dst}".strip()
        made_by = f" ({hop.extractor})" if hop.extractor != Extractor.FAST.value else ""
        parts.append(f"{src} {hop.kind}{made_by} {dst} @ {hop.evidence}")
    return " <- ".join(parts)


def _scope_text(selected: SelectedFile) -> str:
    bits = []
    if selected.tests is not None:
        names = [
            "::".join(p for p in (t.cls, t.function) if p)
            + (f"[{', '.join(t.opinfos)}]" if t.opinfos else "")
            for t in selected.tests
        ]
        bits.append("only " + "; ".join(names))
    if selected.devices:
        bits.append(
            f"{'/'.join(selected.devices)} variants of {', '.join(selected.device_classes)}"
        )
    return f" ({'; '.join(bits)})" if bits else ""


def summary_lines(selection: Selection, limit: int = 20, detail: bool = False) -> list[str]:
    """The human summary: what changed, why everything runs (if it does), what runs: the
    first ``limit`` files with their first chain, or with ``detail`` every file with its
    tests and first chains (``torchtalk select``)."""
    lines = []
    base = selection.base
    placed = (  # when everything runs before placing, no count of entities is known
        "changed entities not placed"
        if selection.run_everything and not selection.entities
        else plural(len(selection.entities), "changed entity", "changed entities")
    )
    lines.append(
        f"changes since {base['rev']} (merge-base {base['merge_base'][:12]}): "
        f"{plural(len(selection.changed_files), 'file')}, {placed}"
    )
    for entity in selection.entities[:limit]:
        lines.append(f"  changed: {entity.label} @ {entity.evidence} ({entity.reason})")
    if len(selection.entities) > limit:
        more = len(selection.entities) - limit
        lines.append(f"  ... {plural(more, 'more changed entity', 'more changed entities')}")
    lines += [f"run everything: {reason}" for reason in _first(selection.everything, limit)]
    lines += record_lines(selection)
    if not selection.run_everything:
        running = selection.running
        lines.append(
            f"selected {len(running)} of {plural(selection.test_files_total, 'test file')}"
        )
        if detail:
            for selected in running:
                lines.extend(_detail_lines(selected))
        for selected in [] if detail else running[:limit]:
            lines.append(f"  {selected.path}{_scope_text(selected)}: {_file_why(selected)}")
        if not detail and len(running) > limit:
            lines.append(f"  ... {plural(len(running) - limit, 'more test file')}")
        lines += nothing_to_run_lines(selection, limit)
    if selection.empty_reason:
        lines.append(f"nothing to run: {selection.empty_reason}")
    lines.extend(f"note: {note}" for note in selection.notes[:limit])
    return shown_lines(lines)


def nothing_to_run_lines(selection: Selection, limit: int = 20) -> list[str]:
    """The files reached whose every recorded test the record decides and none runs."""
    files = selection.nothing_to_run
    if not files or selection.run_everything:
        return []
    names = ", ".join(f.path for f in files[:limit])
    more = f" and {len(files) - limit} more" if len(files) > limit else ""
    return [
        f"decided by the record: nothing to run in {plural(len(files), 'test file')} the"
        f" static walk reaches ({names}{more}): none of their recorded tests ran the change"
    ]


def record_lines(selection: Selection) -> list[str]:
    """What the record decided, or why none was used."""
    record = selection.record
    if not record:
        return []
    if not record.get("used"):
        return [f"record: not used: {record.get('why_not', '?')}"]
    untrusted = sum(record.get("untrusted_tests", {}).values())
    chosen = sum(f.recorded_count for f in selection.files.values())
    line = (
        f"record: {record['label']}: decides {record.get('trusted_tests', 0)} tests, selects "
        f"{chosen} of them"
    )
    if record.get("used_no_cuda"):
        line += (
            f" ({record['used_no_cuda']} more ran an op whose changed CUDA kernels only a test"
            " using CUDA launches, and used none)"
        )
    if untrusted:
        reasons = ", ".join(f"{n} {why}" for why, n in record["untrusted_tests"].items())
        line += f"; {untrusted} recorded tests left to static evidence ({reasons})"
    lines = [line]
    failing = record.get("failed_when_recorded_not_run")
    if failing:
        first = ", ".join(failing["first"][:3])
        more = f" and {failing['tests'] - 3} more" if failing["tests"] > 3 else ""
        lines.append(
            f"record: not run, {plural(failing['tests'], 'test')} that failed when recorded"
            f" and ran nothing this change reaches: they fail as on the record's commit"
            f" ({first}{more})"
        )
    return lines


def _file_why(selected: SelectedFile) -> str:
    """A file's first reason: the record's tests, then its static chain."""
    bits = []
    if selected.recorded_groups:
        count = selected.recorded_count
        first = selected.recorded_groups[0]
        why = chain_text(first.reason, _group_tests(selected, first))
        bits.append(f"{plural(count, 'test')} by the record: {why}")
    if selected.reasons and selected.static_for:
        scope = "" if selected.static_for == "all" else " (tests the record does not decide)"
        bits.append(f"static{scope}: {chain_text(selected.reasons[0])}")
    return "; ".join(bits)


DETAIL_REASONS = 3  # static chains listed per file; --json has every one
DETAIL_RECORDED = 5  # the record's reasons listed per file, and tests named per reason


def _group_tests(selected: SelectedFile, group: RecordedGroup) -> str:
    """Who ran a reason's chain: its tests named (the first few) where the record narrows
    the file, else how many."""
    count = len(group.tests)
    if count == 1:
        return f"{selected.path}::{group.tests[0]}" if group.tests[0] else selected.path
    if not selected.narrowed_by_record:
        return f"{count} tests of the file"
    names = ", ".join(group.tests[:DETAIL_RECORDED])
    more = f" and {count - DETAIL_RECORDED} more" if count > DETAIL_RECORDED else ""
    return f"{names}{more}"


def _detail_lines(selected: SelectedFile) -> list[str]:
    """A file, its narrowing, the tests the record chose and its static chains."""
    lines = [f"  {selected.path}"]
    for scope in selected.tests or []:
        cls = f"{scope.cls}::" if scope.cls else ""
        variants = f" [{', '.join(scope.opinfos)}]" if scope.opinfos else ""
        lines.append(f"    only {cls}{scope.function}{variants}")
    if selected.devices:
        lines.append(
            f"    only {'/'.join(selected.devices)} variants of {', '.join(selected.device_classes)}"
        )
    for group in selected.recorded_groups[:DETAIL_RECORDED]:
        tests = plural(len(group.tests), "test")
        lines.append(f"    {tests} (record): {chain_text(group.reason, _group_tests(selected, group))}")
    if len(selected.recorded_groups) > DETAIL_RECORDED:
        more = len(selected.recorded_groups) - DETAIL_RECORDED
        lines.append(f"    ... {plural(more, 'more reason')} of the record (--json lists every one)")
    if selected.static_for:
        scope = "" if selected.static_for == "all" else " (for tests the record does not decide)"
        label = "because" if not selected.recorded_groups else f"because{scope}"
        reasons = selected.reasons[:DETAIL_REASONS]
        lines.extend(f"    {label} {chain_text(reason)}" for reason in reasons)
        if len(selected.reasons) > DETAIL_REASONS:
            more = len(selected.reasons) - DETAIL_REASONS
            lines.append(f"    and {plural(more, 'more reason')} (--json lists every one)")
    return lines


def markdown_table(selection: Selection, counts: dict[str, int] | None = None) -> str:
    """A GitHub job-summary section: counts, run-everything reasons, selected files."""
    out = ["## TorchTalk test selection", ""]
    total = selection.test_files_total
    chosen = files_selected(selection)
    line = f"Base `{selection.base['rev']}` ({selection.base['merge_base'][:12]}): "
    line += f"{plural(len(selection.changed_files), 'changed file')}, {chosen} of "
    line += f"{plural(total, 'test file')} selected"
    if counts:
        line += f", {plural(counts.get('selected', 0), 'test')} selected, "
        line += f"{counts.get('deselected', 0)} deselected"
    out += [line + ".", ""]
    out += [f"- **run everything**: {_md(reason)}" for reason in _first(selection.everything)]
    out += [f"- {_md(line)}" for line in record_lines(selection)]
    out += [f"- {_md(line)}" for line in nothing_to_run_lines(selection)]
    if selection.empty_reason:
        out.append(f"- nothing to run: {_md(selection.empty_reason)}")
    if selection.running and not selection.run_everything:
        out += ["", "| test file | scope | reason |", "| --- | --- | --- |"]
        for selected in _first(selection.running, SUMMARY_ROWS):
            if isinstance(selected, str):  # how many more, and where they are
                out.append(f"| {selected} | | |")
                continue
            scope = _scope_text(selected).strip(" ()") or "all"
            out.append(f"| `{selected.path}` | {_md(scope)} | {_md(_file_why(selected))} |")
    return "\n".join(shown_lines(out, SUMMARY_BYTES)) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# Output at scale (docs/reliability.md): a change of thousands of files lists the first
# reasons and says where the rest are; GitHub drops a job summary over 1 MiB, so ours
# stays well under it; a file name cannot add lines (its control characters are escaped).
SHOWN_REASONS = 10
SUMMARY_ROWS = 500
SUMMARY_BYTES = 512 * 1024
_REST = "every one is in the JSON report (torchtalk select --json, --torchtalk-report)"
_CONTROL = {code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7F, 0xA0))}
_CONTROL.update({ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r"})


def _first(items: list, limit: int = SHOWN_REASONS) -> list:
    """The first ``limit`` items, then a line saying how many more and where they are."""
    if len(items) <= limit:
        return list(items)
    return [*items[:limit], f"... and {len(items) - limit:,} more: {_REST}"]


def shown_lines(lines: list[str], max_bytes: int | None = None) -> list[str]:
    """``lines`` as output may carry them: each line's control characters escaped
    (``\\n``, ``\\x1b``); with ``max_bytes``, cut where the lines would pass it."""
    shown, size = [], 0
    for line in lines:
        line = line.translate(_CONTROL)
        size += len(line.encode("utf-8", "backslashreplace")) + 1
        if max_bytes is not None and size > max_bytes:
            shown.append(f"... cut at {max_bytes // 1024} KiB: {_REST}")
            break
        shown.append(line)
    return shown
