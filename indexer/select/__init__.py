"""Selection: from a diff to the tests it can break, a pure function of a current index
(``engine.select_tests``); the stages and modules: docs/selection.md."""
