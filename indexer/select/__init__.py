"""Impact-driven test selection: from a git diff to the tests that can break.

``diff`` reads the change, ``tokens`` tells code from comments, ``placement`` maps changed
lines to graph entities (or to run-everything / nothing), ``impact`` walks the graph back
to tests, ``granularity`` narrows a selected file where the evidence is precise,
``staleness`` checks the index against the tree, ``report`` is the JSON schema, and
``engine.select_tests`` ties them together for the plugin, the CLI and the MCP tool.
"""
