"""Binding chains: operator registries (native_functions.yaml, derivatives.yaml,
TORCH_LIBRARY and friends), Python bindings (pybind11, PyMethodDef) and the Python
spellings that reach them.

Extraction writes ``op``, ``registration``, ``derivative`` and ``binding`` nodes with refs
to the C++ callables behind them (scheme ``cpp``) and to other ops (scheme ``op``); the
resolvers in :mod:`indexer.bindings.resolve` link the ``op`` scheme.
"""
