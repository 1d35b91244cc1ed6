"""TorchTalk's indexer: extraction, the graph store, linking and queries.

Layers, each in its own folder:

- ``graph``: the vocabulary (node and edge kinds) and the facts an extractor emits.
- ``extract``: file discovery and the parallel extraction pipeline; one extractor per language.
- ``store``: the SQLite graph database (written once per build, renamed into place).
- ``link``: resolves named references between files into edges.
- ``query``: the one read path used by the CLI, the pytest plugin and the MCP server.
"""
