"""The Python side of the index: modules, definitions, imports, references, tests, OpInfos.

Extraction (``extractor.PythonExtractor``) parses each file once with the stdlib ``ast``
in a worker process; the ``py``, ``opinfo`` and ``fixture`` resolvers
(``resolve.py``) turn the names it records into edges at link time.
"""
