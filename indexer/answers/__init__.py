"""Tool answers that walk as a selection does (the MCP ``affected`` tool): they read the
index through ``indexer.query`` and the selection's walk (``indexer.select``), which the
read API itself never imports (docs/architecture.md)."""
