"""The selection as JSON (schema ``torchtalk.selection/1``, see docs/selection.md), as
text for a terminal, and as a Markdown table for a CI job summary."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from indexer.graph.vocabulary import Extractor
from indexer.select.model import (
    ChangedFile,
    Entity,
    Hop,
    Reason,
    SelectedFile,
    Selection,
    TestScope,
)

SCHEMA = "torchtalk.selection/1"


def selection_to_dict(selection: Selection, counts: dict[str, int] | None = None) -> dict:
    """The report. ``counts`` adds what only a test run knows (collected/deselected items)."""
    data: dict[str, Any] = {
        "schema": SCHEMA,
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
        "selected": [selected_to_dict(selected) for selected in selection.files.values()],
        "counts": {
            "changed_files": len(selection.changed_files),
            "changed_entities": len(selection.entities),
            "test_files_total": selection.test_files_total,
            "test_files_selected": (
                selection.test_files_total if selection.run_everything else len(selection.files)
            ),
            "test_files_narrowed": sum(
                1 for f in selection.files.values() if f.tests is not None or f.devices
            ),
            **(counts or {}),
        },
        "notes": list(selection.notes),
        "timings": {k: round(v, 4) for k, v in selection.timings.items()},
    }
    return data


def selected_to_dict(selected: SelectedFile) -> dict[str, Any]:
    """``asdict(selected)``, written out: a central change selects ~900 files with
    chains of ~15 hops, and asdict's recursive deep copy takes 0.1 s of a selection."""
    return {
        "path": selected.path,
        "reasons": [
            {
                "entity": reason.entity,
                "evidence": reason.evidence,
                "chain": [dict(vars(hop)) for hop in reason.chain],
                "note": reason.note,
            }
            for reason in selected.reasons
        ],
        "tests": None if selected.tests is None else [asdict(t) for t in selected.tests],
        "devices": None if selected.devices is None else list(selected.devices),
        "device_classes": list(selected.device_classes),
    }


def selection_from_dict(data: dict) -> Selection:
    """Rebuild a Selection from :func:`selection_to_dict` output (for xdist workers)."""
    if data.get("schema") != SCHEMA:
        raise ValueError(f"not a {SCHEMA} report: {data.get('schema')!r}")
    selection = Selection(data["source"], data["harness"], data["base"], data["index"])
    selection.changed_files = [ChangedFile(**change) for change in data["changed_files"]]
    selection.entities = [
        Entity(**{k: v for k, v in e.items() if k != "nodes"}, node_count=e["nodes"])
        for e in data["changed_entities"]
    ]
    selection.everything = list(data["run_everything_reasons"])
    for raw in data["selected"]:
        selected = SelectedFile(
            raw["path"],
            [
                Reason(r["entity"], r["evidence"], [Hop(**h) for h in r["chain"]], r["note"])
                for r in raw["reasons"]
            ],
            None if raw["tests"] is None else [TestScope(**t) for t in raw["tests"]],
            raw["devices"],
            list(raw.get("device_classes") or []),
        )
        selection.files[selected.path] = selected
    selection.test_files_total = data["counts"]["test_files_total"]
    selection.notes = list(data["notes"])
    selection.timings = dict(data.get("timings", {}))
    return selection


def chain_text(reason: Reason) -> str:
    """``matmul changed @ L.cpp:10 <- calls _matmul_impl @ L.cpp:40 <- ...``"""
    if not reason.chain:
        return reason.note or f"{reason.entity} changed @ {reason.evidence}"
    parts = [f"{reason.entity} changed @ {reason.evidence}"]
    for hop in reason.chain:
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


def summary_lines(selection: Selection, limit: int = 20) -> list[str]:
    """The human summary: what changed, why everything runs (if it does), what runs."""
    lines = []
    base = selection.base
    lines.append(
        f"changes since {base['rev']} (merge-base {base['merge_base'][:12]}): "
        f"{len(selection.changed_files)} files, {len(selection.entities)} changed entities"
    )
    for entity in selection.entities[:limit]:
        lines.append(f"  changed: {entity.label} @ {entity.evidence} ({entity.reason})")
    if len(selection.entities) > limit:
        lines.append(f"  ... {len(selection.entities) - limit} more changed entities")
    for reason in selection.everything:
        lines.append(f"run everything: {reason}")
    if not selection.run_everything:
        lines.append(f"selected {len(selection.files)} of {selection.test_files_total} test files")
        for selected in list(selection.files.values())[:limit]:
            why = chain_text(selected.reasons[0]) if selected.reasons else ""
            lines.append(f"  {selected.path}{_scope_text(selected)}: {why}")
        if len(selection.files) > limit:
            lines.append(f"  ... {len(selection.files) - limit} more test files")
    if selection.empty_reason:
        lines.append(f"nothing to run: {selection.empty_reason}")
    lines.extend(f"note: {note}" for note in selection.notes[:limit])
    return lines


def markdown_table(selection: Selection, counts: dict[str, int] | None = None) -> str:
    """A GitHub job-summary section: counts, run-everything reasons, selected files."""
    out = ["## TorchTalk test selection", ""]
    total = selection.test_files_total
    chosen = total if selection.run_everything else len(selection.files)
    line = f"Base `{selection.base['rev']}` ({selection.base['merge_base'][:12]}): "
    line += f"{len(selection.changed_files)} changed files, {chosen} of {total} test files selected"
    if counts:
        line += f", {counts.get('selected', 0)} tests selected, {counts.get('deselected', 0)} deselected"
    out += [line + ".", ""]
    for reason in selection.everything:
        out.append(f"- **run everything**: {_md(reason)}")
    if selection.empty_reason:
        out.append(f"- nothing to run: {_md(selection.empty_reason)}")
    if selection.files and not selection.run_everything:
        out += ["", "| test file | scope | reason |", "| --- | --- | --- |"]
        for selected in selection.files.values():
            why = chain_text(selected.reasons[0]) if selected.reasons else ""
            scope = _scope_text(selected).strip(" ()") or "all"
            out.append(f"| `{selected.path}` | {_md(scope)} | {_md(why)} |")
    return "\n".join(out) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
