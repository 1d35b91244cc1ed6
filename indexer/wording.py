"""Counts in words, for everything TorchTalk prints to people."""

from __future__ import annotations


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``1 file``, ``2 files``; ``many`` for nouns that do not just take an s
    (``plural(n, "entity", "entities")``)."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"


def age(seconds: int | None) -> str:
    """``3d``, ``5h``, ``12m``, ``40s``: how old something is, in its largest unit."""
    if seconds is None:
        return "?"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
