"""The seeded mutation plan ``torchtalk audit`` would make for a tree, made without
building it or running its suite: for comparing selections on the audit's mutations
(``bench/same_answers.py --plan``) where the audit's report is gone or its suite cannot
be built here. The same plan as the audit's for the same index, ``--mutations``,
``--seed`` and ``--paths`` (``indexer.audit``: sites, plan); the index is brought up to
date first (``TORCHTALK_CACHE_DIR``), as by the audit.

    TORCHTALK_CACHE_DIR=/tmp/c python bench/audit_plan.py --source TREE --mutations 80 \\
        --seed 1 --paths 'csrc/*.cpp' 'torch_sparse/*' --out plan.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from indexer.audit.mutation import mutation_sites, plan
from indexer.audit.run import mutable
from indexer.durable import write_atomic
from indexer.query.index import Index
from indexer.refresh import refresh_index
from indexer.workspace import Workspace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--mutations", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--paths", nargs="+", default=[])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.out.exists():
        raise SystemExit(f"{args.out} exists; not overwritten")
    workspace = Workspace.resolve(args.source.resolve())
    refresh_index(workspace, show_progress=False)
    index = Index(workspace.db_path)
    try:
        sites = mutation_sites(
            workspace.source, index, args.paths, lambda path: not mutable(path, workspace.manifest)
        )
    finally:
        index.close()
    if not sites:
        raise SystemExit("no function body or header line to mutate under the given --paths")
    mutations = [m.to_dict() for m in plan(sites, args.mutations, args.seed)]
    write_atomic(args.out, (json.dumps(mutations, indent=1) + "\n").encode())
    print(f"{len(mutations)} mutations -> {args.out}")


if __name__ == "__main__":
    main()
