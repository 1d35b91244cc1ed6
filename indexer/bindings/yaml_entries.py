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


def _value(node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        if node.tag == _BOOL_TAG:
            return node.value.lower() in ("true", "yes", "on")
        if node.tag == _NULL_TAG:
            return None
        return node.value
    if isinstance(node, yaml.SequenceNode):
        return [_value(item) for item in node.value]
    if isinstance(node, yaml.MappingNode):
        return {str(_value(key)): _value(value) for key, value in node.value}
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
    if root is None:
        return []
    if not isinstance(root, yaml.SequenceNode):
        raise RegistryFormatError("expected a list of entries at the top level")
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
