"""Impact-driven test selection: from a git diff to the tests that can break.

``diff`` reads the change, ``tokens`` tells code from comments, ``placement`` maps changed
lines to graph entities (or to run-everything / nothing), ``impact`` walks the graph back
to tests, ``chains`` renders a walk's chain as a reason, ``granularity`` narrows a
selected file where the evidence is precise, ``report`` is the JSON schema, and
``engine.select_tests`` ties them together over a current index, writing nothing
(``indexer.select_changes`` refreshes the index first); ``derived`` derives what the walks
read into the index, for index maintenance only (docs/selection.md).
"""
