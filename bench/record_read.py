"""What reading a record costs a fresh process: open it (read, checksums, decode), then
ask the selection's questions (who ran these ops, which modules' import ran them, who
imports a module). CPU seconds, with the code of CODE (a checkout of this repository),
so two commits can be compared on the same record:

    python bench/record_read.py --code . --record RECORD.ttr
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--record", type=Path, required=True)
    args = parser.parse_args()
    sys.path.insert(0, str(args.code.resolve()))
    from indexer.query.recorded import RecordedRuns

    started = time.process_time()
    runs = RecordedRuns.open(args.record)
    opened = time.process_time()
    record = runs.record
    ops = [n for n in record.names if n[0] == "op"
           and n[1].startswith(("aten::mm", "aten::matmul", "aten::add"))]  # fmt: skip
    executing = runs.tests_executing(ops)
    work = runs.import_work(ops)
    importers = runs.importers([text for kind, text in record.names if kind == "module"][:50])
    asked = time.process_time()
    print(
        f"{len(record.tests)} tests, {len(record.names)} names, {len(record.segments)} "
        f"segments: open {opened - started:.3f} s CPU, questions {asked - opened:.3f} s CPU "
        f"({len(executing)} tests ran the ops, {len(work)} modules' import, "
        f"{len(importers)} importers)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
