"""Integration-anchor files: facts of a real tree that any index of it must reproduce.

One YAML file per harness (``tests/integration/<harness>.yml``; the commented template is
``tests/integration/TEMPLATE.yml``, the guide docs/adding-a-framework.md). Read here into
:class:`Anchors`; a file that cannot be read is one :class:`~indexer.errors.UsageError`
line naming the file, the line and the key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from indexer.errors import UsageError
from indexer.graph.vocabulary import EDGE_KINDS, NODE_KINDS

# Each anchor is a mapping whose first key names its kind; the keys each kind takes.
KINDS: dict[str, dict[str, str]] = {
    # An op's kernel for one dispatch key: its definition at PATH:LINE.
    "kernel": {"kernel": "str", "key": "str", "at": "at"},
    # A definition named NAME (qualified, as the index spells it) at PATH:LINE.
    "defines": {"defines": "str", "at": "at"},
    # The tests answer for NAME (an op, a Python API) lists TEST_FILE.
    "covers": {"covers": "str", "test_file": "str"},
    # The affected answer for a function lists TEST_FILE: a change to it can break it.
    "affected": {"affected": "str", "test_file": "str"},
    # Each name reaches the next through the graph's edges (a binding chain).
    "chain": {"chain": "list"},
}
TOP_KEYS = ("harness", "tree", "detected", "minimums", "anchors")
_AT = re.compile(r"(?P<path>[^:\s][^:]*):(?P<line>[1-9][0-9]*)\Z")


@dataclass(frozen=True)
class Anchor:
    kind: str
    values: dict[str, Any]
    line: int  # where it is written in the file, for the failure line

    @property
    def label(self) -> str:
        """How a failure names it: its kind and what it is about."""
        head = self.values[self.kind]
        if self.kind == "chain":
            head = " -> ".join(head)
        parts = [self.kind, str(head)]
        if self.kind == "kernel":
            parts.append(f"[{self.values['key']}]")
        for key in ("at", "test_file"):
            if key in self.values:
                parts.append(f"{'at' if key == 'at' else 'in'} {self.values[key]}")
        return " ".join(parts)


@dataclass(frozen=True)
class Anchors:
    path: Path
    harness: str
    tree: str = ""
    detected: bool = False  # detection must pick this harness for the tree
    minimums: dict[str, int] = field(default_factory=dict)
    anchors: tuple[Anchor, ...] = ()


def _fail(path: Path, line: int | None, problem: str) -> UsageError:
    where = f"{path}:{line}" if line else str(path)
    return UsageError(f"anchor file {where}: {problem}")


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _scalar(path: Path, node: yaml.Node, key: str, kind: str) -> Any:
    if kind == "list":
        if not isinstance(node, yaml.SequenceNode) or len(node.value) < 2:
            raise _fail(path, _line(node), f"{key} must be a list of at least two names")
        items = [_scalar(path, item, key, "str") for item in node.value]
        return items
    if not isinstance(node, yaml.ScalarNode) or not str(node.value).strip():
        raise _fail(path, _line(node), f"{key} must be a non-empty string")
    value = str(node.value).strip()
    if kind == "at" and _AT.match(value) is None:
        raise _fail(path, _line(node), f"{key} must be PATH:LINE (got {value!r})")
    return value


def _anchor(path: Path, node: yaml.Node) -> Anchor:
    if not isinstance(node, yaml.MappingNode) or not node.value:
        raise _fail(path, _line(node), "an anchor must be a mapping (kernel:, covers:, ...)")
    keys = [str(key.value) for key, _ in node.value]
    kind = keys[0]
    if kind not in KINDS:
        raise _fail(path, _line(node), f"unknown anchor kind {kind!r} (known: {', '.join(KINDS)})")
    spec = KINDS[kind]
    values: dict[str, Any] = {}
    for key_node, value_node in node.value:
        key = str(key_node.value)
        if key not in spec:
            raise _fail(
                path, _line(key_node), f"{kind} anchor takes {', '.join(spec)}, not {key!r}"
            )
        values[key] = _scalar(path, value_node, key, spec[key])
    missing = [key for key in spec if key not in values]
    if missing:
        raise _fail(path, _line(node), f"{kind} anchor lacks {', '.join(missing)}")
    return Anchor(kind, values, _line(node))


def read_anchors(path: Path) -> Anchors:
    """The anchors of one file, or a one-line error naming what is wrong and where."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _fail(path, None, "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(path, None, f"cannot be read ({exc})") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise _fail(path, mark.line + 1 if mark else None, f"invalid YAML: {problem}") from None
    if not isinstance(root, yaml.MappingNode):
        raise _fail(path, None, "must be a mapping with harness: and anchors:")
    top = {str(key.value): (key, value) for key, value in root.value}
    for name, (key, _) in top.items():
        if name not in TOP_KEYS:
            raise _fail(path, _line(key), f"unknown key {name!r} (known: {', '.join(TOP_KEYS)})")
    if "harness" not in top:
        raise _fail(path, None, "lacks harness: (the harness these facts are for)")
    harness = _scalar(path, top["harness"][1], "harness", "str")
    tree = _scalar(path, top["tree"][1], "tree", "str") if "tree" in top else ""
    detected = False
    if "detected" in top:
        value = yaml.safe_load(yaml.serialize(top["detected"][1]))
        if not isinstance(value, bool):
            raise _fail(path, _line(top["detected"][1]), "detected must be true or false")
        detected = value
    minimums = _minimums(path, top["minimums"][1]) if "minimums" in top else {}
    anchors: list[Anchor] = []
    if "anchors" in top:
        node = top["anchors"][1]
        if not isinstance(node, yaml.SequenceNode):
            raise _fail(path, _line(node), "anchors must be a list")
        anchors = [_anchor(path, item) for item in node.value]
    if not anchors and not minimums:
        raise _fail(path, None, "holds no anchors and no minimums: nothing to verify")
    return Anchors(path, harness, tree, detected, minimums, tuple(anchors))


def _minimums(path: Path, node: yaml.Node) -> dict[str, int]:
    if not isinstance(node, yaml.MappingNode):
        raise _fail(path, _line(node), "minimums must map node or edge kinds to counts")
    found = {}
    for key_node, value_node in node.value:
        kind = str(key_node.value)
        if kind not in NODE_KINDS and kind not in EDGE_KINDS:
            raise _fail(path, _line(key_node), f"minimums: {kind!r} is no node or edge kind")
        value = yaml.safe_load(yaml.serialize(value_node))
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise _fail(path, _line(value_node), f"minimums: {kind} must be a count")
        found[kind] = value
    return found
