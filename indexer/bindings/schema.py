"""Operator schemas as native_functions.yaml and ``m.def`` write them.

``add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor`` names the op
``add`` with overload ``Tensor``; its arguments keep their types, defaults and whether
they are keyword-only. Only what the index needs is parsed: the name, the overload, the
arguments (for display and the ``_out`` naming rule), and the returns as written.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from indexer.cpp.brackets import closing_paren


@dataclass(frozen=True, slots=True)
class Argument:
    name: str
    type: str
    default: str | None = None
    kwarg_only: bool = False

    def as_dict(self) -> dict[str, object]:
        data: dict[str, object] = {"name": self.name, "type": self.type}
        if self.default is not None:
            data["default"] = self.default
        if self.kwarg_only:
            data["kwarg_only"] = True
        return data


@dataclass(frozen=True, slots=True)
class Schema:
    namespace: str | None  # 'aten' in 'aten::add.Tensor(...)', else None
    name: str  # 'add', 'add_', '__and__'
    overload: str  # '' for the default overload
    arguments: tuple[Argument, ...] = field(default=())
    returns: str = ""
    has_signature: bool = False  # False for a bare name: m.def("scale", &fn)

    @property
    def full_name(self) -> str:
        """``name.overload`` (``name`` for the default overload), without namespace."""
        return f"{self.name}.{self.overload}" if self.overload else self.name

    @property
    def is_out(self) -> bool:
        """An out= variant: a keyword-only argument the op writes to (``Tensor(a!) out``)."""
        return any(arg.kwarg_only and "!" in arg.type for arg in self.arguments)

    @property
    def is_inplace(self) -> bool:
        return self.name.endswith("_") and not self.name.endswith("__")


def _split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split at ``sep`` outside brackets and string literals."""
    parts: list[str] = []
    depth = 0
    quote = ""
    start = 0
    i = 0
    while i < len(text):
        char = text[i]
        if quote:
            if char == "\\":
                i += 1
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return [part.strip() for part in parts if part.strip()]


def _parse_argument(text: str, kwarg_only: bool) -> Argument:
    default = None
    pieces = _split_top_level(text, "=")
    if len(pieces) >= 2:
        text, default = pieces[0], "=".join(pieces[1:])
    head, _, name = text.rpartition(" ")
    if not head:  # a type with no name, as some hand-written schemas have
        return Argument(name="", type=text.strip(), default=default, kwarg_only=kwarg_only)
    return Argument(name=name.strip(), type=head.strip(), default=default, kwarg_only=kwarg_only)


def split_op_name(text: str) -> tuple[str | None, str, str]:
    """``'aten::add.Tensor'`` -> ``('aten', 'add', 'Tensor')``; no namespace -> None."""
    namespace = None
    if "::" in text:
        namespace, _, text = text.rpartition("::")
    name, _, overload = text.strip().partition(".")
    return namespace, name.strip(), overload.strip()


def parse_schema(text: str) -> Schema | None:
    """The schema in ``text`` (a full schema or a bare ``ns::name.overload``), or None."""
    text = " ".join(text.split())
    if not text:
        return None
    open_at = text.find("(")
    if open_at < 0:
        namespace, name, overload = split_op_name(text)
        return Schema(namespace, name, overload) if name and _is_op_name(name) else None
    namespace, name, overload = split_op_name(text[:open_at])
    if not name or not _is_op_name(name):
        return None
    close_at = closing_paren(text, open_at)
    if close_at < 0:
        return None
    arguments = []
    kwarg_only = False
    for piece in _split_top_level(text[open_at + 1 : close_at]):
        if piece == "*":
            kwarg_only = True
            continue
        arguments.append(_parse_argument(piece, kwarg_only))
    returns = text[close_at + 1 :].strip()
    returns = returns[2:].strip() if returns.startswith("->") else returns
    return Schema(namespace, name, overload, tuple(arguments), returns, has_signature=True)


def _is_op_name(name: str) -> bool:
    return name.replace("_", "a").isalnum() and not name[0].isdigit()
