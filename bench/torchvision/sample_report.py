"""A seeded sample of an audit report's measured mutations, as a report to replay
(docs/audit.md, "torchvision 0.21: precise mode"): replaying every C++ mutation with
precise mode parses the mutated translation units again per mutation, minutes each on
the shared cores, so a sample of the caught ones is replayed with and without it.

    python bench/torchvision/sample_report.py REPORT COUNT SEED OUT
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path


def main() -> int:
    report_path, count, seed, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    report = json.loads(Path(report_path).read_text())
    caught = [result for result in report["results"] if result["status"] == "caught"]
    chosen = {r["id"] for r in random.Random(seed).sample(caught, min(count, len(caught)))}
    report["results"] = [r for r in report["results"] if r["id"] in chosen]
    report["plan"] = [m for m in report["plan"] if m["id"] in chosen]
    Path(out).write_text(json.dumps(report, indent=1) + "\n")
    print(" ".join(sorted(chosen)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
