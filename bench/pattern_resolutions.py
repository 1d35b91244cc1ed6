"""What the `py` scheme's run-time-name refs (targets with ``*``: ``getattr(self, "reset_" +
kind)``) resolve to in one index: the refs, the resolutions, and a digest of them by
qualified name, so two builds of one tree (whose node ids differ) can be compared.

    PYTHONPATH=CODE python bench/pattern_resolutions.py INDEX.sqlite
"""

from __future__ import annotations

import hashlib
import sqlite3
import sys

from indexer.link.linker import _load_refs, _resolver
from indexer.link.symbols import SymbolTable


def main(db: str) -> None:
    conn = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    refs = [ref for ref in _load_refs(conn, None).get("py", []) if "*" in ref.target]
    qualname = dict(conn.execute("SELECT id, qualname FROM nodes"))
    found = sorted(
        (qualname.get(r.src_id), qualname.get(r.dst_id))
        for r in _resolver("py")(refs, SymbolTable(conn))
    )
    digest = hashlib.md5(repr(found).encode()).hexdigest()[:12]
    print(f"{len(refs)} refs, {len(found)} resolutions, digest {digest}")


if __name__ == "__main__":
    main(sys.argv[1])
