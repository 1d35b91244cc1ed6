"""The shape of every answer: compact text for a model's context, and structured data.

Tools build an :class:`Answer`; the MCP server sends ``to_text()`` plus ``to_dict()``,
the CLI prints one or the other. Every item carries file:line evidence where it has one.

The text is concise by default: tools write items most important first (kernels and
definitions before mentions), and ``to_text`` stops before ``budget`` characters, saying
how many lines it left out and how to ask for them (``more``). ``to_dict`` always holds
every item. A caller that asks for a number of items (``limit``) sets ``budget=None``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

DEFAULT_BUDGET = 2000  # characters of text an answer takes in a model's context
_FOOTER_ROOM = 160  # kept for the line saying what was left out


@dataclass
class Item:
    label: str  # what this line is about: 'at::native::matmul'
    evidence: str | None = None  # 'aten/src/ATen/native/LinearAlgebra.cpp:2010'
    detail: str = ""  # short role or relation: 'CPU kernel', 'calls (ambiguous: 2)'
    depth: int = 0  # indentation for chains and trees
    data: dict[str, Any] = field(default_factory=dict)

    def to_text(self) -> str:
        parts = ["  " * self.depth + self.label]
        if self.detail:
            parts.append(f"[{self.detail}]")
        if self.evidence:
            parts.append(f"@ {self.evidence}")
        return " ".join(parts)


@dataclass
class Answer:
    tool: str
    query: str
    found: bool = True
    title: str = ""
    items: list[Item] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # caveats: incomplete build, ambiguity
    suggestions: list[str] = field(default_factory=list)  # closest names when not found
    total: int | None = None  # items before truncation, when truncated
    data: dict[str, Any] = field(default_factory=dict)
    budget: int | None = DEFAULT_BUDGET  # characters of text; None: every item
    more: str = ""  # how to ask for what the budget leaves out: "pass limit=200"
    warnings: list[str] = field(default_factory=list)  # lines before the title: stale index

    @classmethod
    def not_found(cls, tool: str, query: str, what: str, suggestions: list[str]) -> Answer:
        note = f"{what} {query!r} not found in the index."
        # a known name equal to the one asked is no suggestion: the tool did not take it
        others = [name for name in suggestions if name != query]
        return cls(tool, query, found=False, title=note, suggestions=others)

    def truncate(self, limit: int) -> Answer:
        if len(self.items) > limit:
            self.total = len(self.items)
            self.items = self.items[:limit]
        return self

    def to_text(self) -> str:
        head = [*self.warnings, *([self.title] if self.title else [])]
        tail = []
        if self.suggestions:
            tail.append("Closest known names: " + ", ".join(self.suggestions))
        tail.extend(f"note: {note}" for note in self.notes)
        body = [item.to_text() for item in self.items]
        shown = len(body)
        if self.budget is not None:
            room = self.budget - sum(len(line) + 1 for line in head + tail) - _FOOTER_ROOM
            body = _within(body, [bool(item.data.get("minor")) for item in self.items], room)
        in_data = shown - len(body)  # items the structured output holds, the text leaves out
        beyond = (self.total - len(self.items)) if self.total is not None else 0
        if in_data or beyond > 0:
            where = ""
            if in_data and beyond > 0:
                where = f" ({in_data} of them in the structured output)"
            elif in_data:
                where = " (in the structured output)"
            how = f"; {self.more}" if self.more else ""
            body = [*body, f"... {in_data + max(beyond, 0)} more not shown{where}{how}"]
        lines = head + body + tail
        if not lines:
            lines.append(f"{self.tool}({self.query!r}): no results")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)

    def to_json(self) -> str:
        """``to_dict()`` as JSON (what is not JSON written as its ``str``), encoded in one
        pass of the C encoder: an affected answer's tens of thousands of values, walked in
        Python by ``to_dict``, were a tenth of its time."""
        return json.dumps(self, default=_jsonable)


_LEAVES = frozenset({str, int, float, bool, type(None)})


def _jsonable(value: Any) -> Any:
    """What the JSON encoder cannot write itself: a dataclass's fields, else its text."""
    if is_dataclass(value) and not isinstance(value, type):
        return {item.name: getattr(value, item.name) for item in fields(value)}
    return str(value)


def _plain(value: Any) -> Any:
    """``dataclasses.asdict`` without its deep copy of every leaf: an affected answer's
    structured output holds thousands of values, and the copy took most of its time."""
    if type(value) in _LEAVES:  # most values: answered before the dataclass check
        return value
    if is_dataclass(value) and not isinstance(value, type):
        return {item.name: _plain(getattr(value, item.name)) for item in fields(value)}
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, tuple):
        return (
            type(value)(*map(_plain, value))
            if hasattr(value, "_fields")
            else tuple(map(_plain, value))
        )
    return value


def _within(lines: list[str], minor: list[bool], room: int) -> list[str]:
    """The lines that fit in ``room`` characters: minor lines (indirections, counts,
    mentions) are left out first, the last of them first; then the list is cut at the
    end. The first line is always kept."""
    size = sum(len(line) + 1 for line in lines)
    keep = [True] * len(lines)
    for position in range(len(lines) - 1, 0, -1):
        if size <= room:
            break
        if minor[position]:
            keep[position] = False
            size -= len(lines[position]) + 1
    kept = [line for line, wanted in zip(lines, keep, strict=True) if wanted]
    cut = 0
    for line in kept:
        room -= len(line) + 1
        if room < 0 and cut:
            break
        cut += 1
    return kept[:cut]
