"""One record from several: xdist workers of one run, or the shards of a CI job.

Merging is a union that does not depend on order: segments of the same kind and label
(a file's collection, seen by every worker; one module fixture set up by two workers) are
one segment holding what either saw, and a test recorded twice (a re-run shard) keeps
everything both runs executed, with the worse outcome, so that neither run's evidence is
lost. The result is canonical (``storage.canonical``), so the same inputs give the same
bytes in any order.
"""

from __future__ import annotations

import json

from indexer.record.model import OUTCOMES, Record, RecordedTest
from indexer.record.storage import RecordError, canonical

# Worse first: a test that failed in one shard and passed in another is not one whose
# record can be trusted to show everything it does.
_WORSE_FIRST = ("error", "failed", "skipped", "xfailed", "xpassed", "passed")
_SEVERITY = {outcome: rank for rank, outcome in enumerate(_WORSE_FIRST)}
assert set(_SEVERITY) == set(OUTCOMES)


def merge(records: list[Record], *, allow_mixed_commits: bool = False) -> Record:
    """The union of ``records``; RecordError when they were made at different commits
    (unless allowed: the merged record then names no single commit)."""
    if not records:
        raise RecordError("nothing to merge")
    commits = sorted({str(r.meta.get("commit")) for r in records})
    if len(commits) > 1 and not allow_mixed_commits:
        raise RecordError(
            f"records of different commits ({', '.join(c[:12] for c in commits)}); "
            "pass --allow-mixed-commits to merge them anyway"
        )
    # A dirty tree is another tree than its commit's (docs/recording.md#whose-record-it-is).
    trees = {json.dumps(r.meta.get("dirty") or {}, sort_keys=True) for r in records}
    if len(trees) > 1 and not allow_mixed_commits:
        raise RecordError(
            "records of different tree states (the same commit with different uncommitted "
            "changes); pass --allow-mixed-commits to merge them anyway"
        )
    meta = _merged_meta(records, mixed=len(commits) > 1 or len(trees) > 1)
    out = Record(meta=meta)
    by_nodeid: dict[str, RecordedTest] = {}
    interned: dict[frozenset[int], frozenset[int]] = {}
    for record in records:
        remap = {}
        # Segments that share one set of names (a work set, docs/recording.md) share it
        # here too: memory grows with the distinct work sets, not with the tests.
        renamed: dict[int, frozenset[int]] = {}
        for index, segment in enumerate(record.segments):
            new = out.add_segment(segment.kind, segment.label)
            names = renamed.get(id(segment.names))
            if names is None:
                names = frozenset(out.name_id(*record.names[n]) for n in segment.names)
                names = renamed[id(segment.names)] = interned.setdefault(names, names)
            out.segments[new].names = names  # type: ignore[assignment]
            remap[index] = new
        for test in record.tests:
            segments = [remap[s] for s in test.segments]
            seen = by_nodeid.get(test.nodeid)
            if seen is None:
                by_nodeid[test.nodeid] = RecordedTest(
                    test.nodeid, test.file, test.outcome, test.duration, segments, test.unrecorded
                )
                continue
            seen.segments.extend(segments)
            if _SEVERITY[test.outcome] < _SEVERITY[seen.outcome]:
                seen.outcome = test.outcome
            seen.duration = max(seen.duration, test.duration)
            problems = sorted({p for p in (seen.unrecorded, test.unrecorded) if p})
            seen.unrecorded = "; ".join(problems)
        for path, content in record.files.items():
            known = out.files.setdefault(path, content)
            if known != content:
                out.files[path] = ""  # recorded at two contents: neither can be trusted
    out.files = {p: h for p, h in out.files.items() if h}
    out.tests = list(by_nodeid.values())
    return canonical(out)


def _merged_meta(records: list[Record], *, mixed: bool) -> dict:
    metas = [r.meta for r in records]
    meta = dict(sorted(metas, key=lambda m: str(m.get("created_at", "")))[-1])
    meta["created_at"] = max(str(m.get("created_at", "")) for m in metas)
    meta["started_at"] = min(str(m.get("started_at", m.get("created_at", ""))) for m in metas)
    meta["devices"] = sorted({d for m in metas for d in m.get("devices", [])})
    # A test recorded where CUDA was absent used no CUDA there, not everywhere: only a
    # device every part had can tell its tests from those that did not use it.
    meta["devices_in_every_part"] = sorted(
        set.intersection(
            *(set(m.get("devices_in_every_part", m.get("devices", []))) for m in metas)
        )
    )
    meta["parts"] = sum(int(m.get("parts", 1)) for m in metas)
    # What skips read is one environment only when every part had it (a CPU shard's
    # skipped CUDA tests are not decided by a GPU shard's environment).
    if any(m.get("environment") != metas[0].get("environment") for m in metas):
        meta.pop("environment", None)
    if mixed:
        meta["commit"] = None
        meta["commits"] = sorted({str(m.get("commit")) for m in metas})
        meta.pop("dirty", None)  # no single tree: the merged record names none
    # A part cut short (a killed shard or worker) makes the whole record partial.
    reasons = {str(r) for m in metas for r in m.get("partial_reasons") or ()}
    if reasons or any("partial" in m for m in metas):
        meta["partial"] = any(bool(m.get("partial")) for m in metas)
        meta["partial_reasons"] = sorted(reasons)
    meta["problems"] = sorted({p for m in metas for p in m.get("problems", [])})
    # Shards may differ in how they observed (a GPU shard captures kernels, a CPU shard
    # says why not): the merged record says each way, not only the latest shard's.
    mechanisms: dict[str, set[str]] = {}
    for m in metas:
        for key, how in (m.get("mechanisms") or {}).items():
            mechanisms.setdefault(key, set()).add(str(how))
    for key, hows in mechanisms.items():
        if any(key not in (m.get("mechanisms") or {}) for m in metas):
            hows.add("unknown: a part does not say (an older record)")
    if mechanisms:
        meta["mechanisms"] = {key: "; ".join(sorted(hows)) for key, hows in mechanisms.items()}
    return meta
