"""The entries of a YAML registry (native_functions.yaml, derivatives.yaml), with lines.

The file is composed (not constructed) with libyaml when available, so every entry and
every key inside it keeps the line it starts on; native_functions.yaml (~16k lines)
composes in a fraction of a second.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BOOL_TAG = "tag:yaml.org,2002:bool"
_NULL_TAG = "tag:yaml.org,2002:null"


class RegistryFormatError(ValueError):
    """The YAML is not a list of mappings, as both registries are."""


@dataclass(slots=True)
class Entry:
    line: int  # 1-based line of the entry's first key
    end_line: int
    data: dict[str, Any]
    key_lines: dict[str, int] = field(default_factory=dict)  # top-level key -> line
    nested_lines: dict[str, dict[str, int]] = field(
        default_factory=dict
    )  # 'dispatch' -> key -> line

    def text(self, key: str, default: str = "") -> str:
        value = self.data.get(key)
        return default if value is None else str(value)

    def line_of(self, key: str) -> int:
        return self.key_lines.get(key, self.line)


# An alias names a node composed once, but every use of it is expanded into a value of
# its own: nested aliases make a few hundred bytes expand to billions of values (a
# 335-byte file took 14 s and 886 MB). A file may expand to at most this many values per
# byte it holds (plain YAML has fewer values than bytes) and nest this deep.
VALUES_PER_BYTE = 4
MIN_VALUES = 10_000
MAX_DEPTH = 100


class _Expansion:
    """Turns composed nodes into values, counting them against the file's allowance."""

    def __init__(self, text_bytes: int) -> None:
        self.left = max(MIN_VALUES, VALUES_PER_BYTE * text_bytes)
        self.allowed = self.left

    def value(self, node: yaml.Node, depth: int = 0) -> Any:
        self.left -= 1
        if self.left < 0:
            raise RegistryFormatError(
                f"YAML aliases expand past {self.allowed:,} values (the file's allowance: "
                f"{VALUES_PER_BYTE} per byte); refused"
            )
        if depth > MAX_DEPTH:
            raise RegistryFormatError(f"YAML nested deeper than {MAX_DEPTH} levels; refused")
        if isinstance(node, yaml.ScalarNode):
            if node.tag == _BOOL_TAG:
                return node.value.lower() in ("true", "yes", "on")
            if node.tag == _NULL_TAG:
                return None
            return node.value
        if isinstance(node, yaml.SequenceNode):
            return [self.value(item, depth + 1) for item in node.value]
        if isinstance(node, yaml.MappingNode):
            return {
                str(self.value(key, depth + 1)): self.value(value, depth + 1)
                for key, value in node.value
            }
        return None


def _end_line(node: yaml.Node) -> int:
    # A block mapping ends at the start of the next entry; step back over that line.
    end = node.end_mark
    return end.line if end.column == 0 else end.line + 1


def read_entries(text: str) -> list[Entry]:
    """Every mapping of the top-level list, in file order. Raises on malformed YAML."""
    try:
        root = yaml.compose(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise RegistryFormatError(f"invalid YAML{where}: {problem}") from None
    except RecursionError:
        raise RegistryFormatError(f"YAML nested deeper than {MAX_DEPTH} levels; refused") from None
    if root is None:
        return []
    if not isinstance(root, yaml.SequenceNode):
        raise RegistryFormatError("expected a list of entries at the top level")
    expansion = _Expansion(len(text))
    _value = expansion.value
    entries = []
    for item in root.value:
        if not isinstance(item, yaml.MappingNode):
            continue
        data: dict[str, Any] = {}
        key_lines: dict[str, int] = {}
        nested_lines: dict[str, dict[str, int]] = {}
        for key_node, value_node in item.value:
            key = str(_value(key_node))
            data[key] = _value(value_node)
            key_lines[key] = key_node.start_mark.line + 1
            if isinstance(value_node, yaml.MappingNode):
                nested_lines[key] = {
                    str(_value(k)): k.start_mark.line + 1 for k, _ in value_node.value
                }
        entries.append(
            Entry(item.start_mark.line + 1, _end_line(item), data, key_lines, nested_lines)
        )
    return entries
