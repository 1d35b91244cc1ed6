"""Precise C++ mode: libclang over a compile database, merged over the fast call graph.

compdb (finding the database), toolchain (compiler headers, arguments), tu (one TU in a
worker), cache (per TU), merge (into the graph), layer (the whole step), summary (its
report). docs/architecture.md#precise-c-mode.
"""
