"""The per-index lookup tables queries build on first use, for a server to build when idle.

Each is read once per index (``Index.shared``) and costs a few hundred milliseconds on
PyTorch: the ops' Python names, the raw library calls, the stub registrations, the
Python short names that "not found" answers suggest from. Loaded ahead, the first question pays none of it.
"""

from __future__ import annotations

from collections.abc import Callable

from indexer.query.index import Index


def _query_modules(index: Index) -> None:
    """Import the tools' query modules (the MCP server imports them on first use)."""
    import indexer.query.graph
    import indexer.query.modules
    import indexer.query.search
    import indexer.query.tests
    import indexer.query.trace  # noqa: F401


def tables() -> list[tuple[str, Callable[[Index], object]]]:
    from indexer.query import key_coverage
    from indexer.query.below_kernel import raw_calls
    from indexer.query.native_reach import autograd_apply_targets
    from indexer.query.op_chain import dispatch_keys, formula_calls, stub_registrations
    from indexer.query.op_lookup import python_names
    from indexer.query.py_lookup import module_ids, short_names

    return [
        ("the query modules", _query_modules),
        ("the ops' Python names", python_names),
        ("the raw library calls", raw_calls),
        ("the DispatchStub registrations", stub_registrations),
        ("the dispatch keys trace's focus takes", dispatch_keys),
        ("the registrations per dispatch key", key_coverage.tables),
        ("the file paths", Index.file_paths),
        ("the test files", Index.test_file_paths),
        ("the Python short names", short_names),
        ("the Python modules' ids", module_ids),
        ("the backward formulas' calls", formula_calls),
        ("the autograd functions' apply targets", autograd_apply_targets),
    ]
