"""The shape of every answer: compact text for a model's context, and structured data.

Tools build an :class:`Answer`; the MCP server sends ``to_text()`` plus ``to_dict()``,
the CLI prints one or the other. Every item carries file:line evidence where it has one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


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

    @classmethod
    def not_found(cls, tool: str, query: str, what: str, suggestions: list[str]) -> Answer:
        note = f"{what} {query!r} not found in the index."
        return cls(tool, query, found=False, title=note, suggestions=suggestions)

    def truncate(self, limit: int) -> Answer:
        if len(self.items) > limit:
            self.total = len(self.items)
            self.items = self.items[:limit]
        return self

    def to_text(self) -> str:
        lines = [self.title] if self.title else []
        lines.extend(item.to_text() for item in self.items)
        if self.total is not None and self.total > len(self.items):
            lines.append(f"... {self.total - len(self.items)} more not shown")
        if self.suggestions:
            lines.append("Closest known names: " + ", ".join(self.suggestions))
        lines.extend(f"note: {note}" for note in self.notes)
        if not lines:
            lines.append(f"{self.tool}({self.query!r}): no results")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
