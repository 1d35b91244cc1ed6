"""Counts in words, for everything TorchTalk prints to people."""

from __future__ import annotations


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``1 file``, ``2 files``; ``many`` for nouns that do not just take an s
    (``plural(n, "entity", "entities")``)."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"
