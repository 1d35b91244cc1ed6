"""What the recording journal costs per test: a pytest plugin that times its writes.

Load it beside the recorder, in the tests' own process, and it prints, at the end, how
many journal entries were written and the CPU and wall time spent writing them (building
the entry, hashing newly named files, checksum, ``os.write``; the close's fsync apart) and
turning the journal into the record at the end (reading it back, the union, canonical
order; the record's own write apart):

    PYTHONPATH=/path/to/torchtalk:/path/to/torchtalk/bench python -m pytest test_x.py \\
        --torchtalk-record-to=/tmp/x.ttr -p journal_cost

Figures: docs/performance.md#durable-recording-journal.
"""

from __future__ import annotations

import contextlib
import sys
import time

from indexer.record import journal

_spent = {
    "entries": 0, "cpu": 0.0, "wall": 0.0, "bytes": 0, "close_wall": 0.0, "finalize_wall": 0.0,
}  # fmt: skip
_per_entry: list[float] = []  # CPU seconds of each test's entry, in order


def _timed(method, key: str):
    def run(self, *args, **kwargs):
        cpu, wall = time.process_time(), time.perf_counter()
        try:
            return method(self, *args, **kwargs)
        finally:
            if key == "test":
                _spent["entries"] += 1
                _per_entry.append(time.process_time() - cpu)
                _spent["cpu"] += _per_entry[-1]
                _spent["wall"] += time.perf_counter() - wall
            else:
                _spent["close_wall"] += time.perf_counter() - wall
                with contextlib.suppress(OSError):
                    _spent["bytes"] = self.path.stat().st_size

    return run


journal.JournalWriter.test = _timed(journal.JournalWriter.test, "test")
journal.JournalWriter.close = _timed(journal.JournalWriter.close, "close")
_finalize = journal.finalize


def _timed_finalize(paths):
    wall = time.perf_counter()
    try:
        return _finalize(paths)
    finally:
        _spent["finalize_wall"] += time.perf_counter() - wall


journal.finalize = _timed_finalize


def pytest_unconfigure(config) -> None:
    entries = _spent["entries"] or 1
    later = sorted(_per_entry[1:]) or [0.0]
    first = _per_entry[0] if _per_entry else 0.0
    print(
        f"JOURNAL entries={_spent['entries']} cpu_s={_spent['cpu']:.3f} "
        f"wall_s={_spent['wall']:.3f} per_test_cpu_us={1e6 * _spent['cpu'] / entries:.0f} "
        f"per_test_wall_us={1e6 * _spent['wall'] / entries:.0f} bytes={_spent['bytes']} "
        f"close_wall_s={_spent['close_wall']:.3f} "
        f"finalize_wall_s={_spent['finalize_wall']:.3f} first_entry_cpu_us={1e6 * first:.0f} "
        f"later_entries_cpu_us_median={1e6 * later[len(later) // 2]:.0f} "
        f"p90={1e6 * later[int(len(later) * 0.9)]:.0f}",
        file=sys.stderr,
    )
