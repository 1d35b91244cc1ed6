"""Integration anchors: a harness's known facts of a real tree, and checking an index
against them (docs/adding-a-framework.md)."""
