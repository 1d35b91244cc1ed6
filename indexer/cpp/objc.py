"""Objective-C++ (PyTorch's MPS kernels, ``.mm`` files) written as C++ of the same length.

tree-sitter-cpp reads Objective-C's message sends (``[encoder setBuffer:buf offset:0]``)
as broken attributes or lambdas, and loses the namespaces and functions around them: on
ATen's 104 .mm files, 0.5 MB of ERROR regions. Rewritten byte for byte (so lines, columns
and offsets stay the file's), they parse as the C++ they amount to:

- a message send is a parenthesised comma expression of its receiver and arguments:
  ``[enc setBuffer:buf offset:0]`` -> ``(enc          ,buf       ,0)``, so the calls in
  its arguments (``[graph reshape:x(...) ...]``) are still calls of the function;
- ``@autoreleasepool {`` is ``if (true) {``; a block `` ^(...) {`` a lambda
  ``[](...) {``; ``@"..."``, ``@1``, ``@(...)`` and ``@{...}`` what they box, ``@[...]``
  an initializer list ``{...}``, ``@selector(m)`` a call;
- a block type's declarator ``(^PoolingOpBlock)(...)`` (a typedef, a parameter) is a
  function pointer's ``(*PoolingOpBlock)(...)``, and a block whose signature is a macro
  (``= ^PoolingOpFn(graph, desc) {``, as ATen's MPS ops write them) a lambda
  ``= []          (graph, desc) {``: without both, a file's namespaces end at the typedef.
"""

from __future__ import annotations

import re

_AUTORELEASE = b"@autoreleasepool"
_AUTORELEASE_AS = b"if (true)".ljust(len(_AUTORELEASE))
# A block is an argument or a value (`f(q, ^() {`, `x = ^{`): after ',', '(', '=' or ':'
# and a blank, which makes room for '[]'. Elsewhere `a ^ (b)` is C's exclusive or.
_BLOCK = re.compile(rb"(?<=[,(=:])[ \t]\^(?=\s*[({])")
# '@' of a literal (@"s", @[...], @(x), @{...}, @1, @-1, @YES) or of a compiler directive
# used as an expression (@selector(...), @encode(...), @available(...)).
# `(^Name)` declares a block: a typedef's or a parameter's name.
_BLOCK_DECLARATOR = re.compile(rb"(?<=\()\s*\^(?=\s*[A-Za-z_]\w*\s*\)\s*\()")
# `= ^SomeFn(a, b) {`: a block literal whose return type and parameters a macro writes.
_MACRO_BLOCK = re.compile(rb"(?<=[=,(])(\s*)\^([A-Za-z_]\w*)(?=\s*\([^()]*\)\s*\{)")
_BOXED = re.compile(rb"@(?=[\d\"\[({]|-\d|(?:YES|NO|selector|encode|available)\b)")
# Brackets, and what may hold brackets that are not code.
_TOKENS = re.compile(rb'[\[\]]|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|//[^\n]*|/\*.*?\*/', re.S)
# In a bracket's text with nested brackets masked: a receiver, then a selector.
_SEND = re.compile(rb"\s*[^\s,:;{}=]+\s+([A-Za-z_]\w*)\s*(:|$)")
# A selector part is a name and its colon, written together: `a ? b : c` (a ternary in
# an argument, a space before its colon) is not one.
_SELECTOR_PART = re.compile(rb"(?<![\w:])([A-Za-z_]\w*):(?!:)")
_STRING = re.compile(rb'"(?:[^"\\\n]|\\.)*"')


def as_cpp(data: bytes) -> bytes:
    """``data`` with its Objective-C written as C++ of the same length."""
    buffer = bytearray(data)
    for start, value in objc_rewrites(data):
        buffer[start : start + len(value)] = value
    return bytes(buffer)


def objc_rewrites(data: bytes) -> list[tuple[int, bytes]]:
    """(offset, same-length replacement) of each Objective-C construct in ``data``."""
    found = [(match.start(), _AUTORELEASE_AS) for match in re.finditer(_AUTORELEASE, data)]
    found += [(match.start(), b"[]") for match in _BLOCK.finditer(data)]
    found += [(match.end() - 1, b"*") for match in _BLOCK_DECLARATOR.finditer(data)]
    found += [
        (match.start(2) - 1, b"[]".ljust(len(match.group(2)) + 1))
        for match in _MACRO_BLOCK.finditer(data)
    ]
    found += [(match.start(), b" ") for match in _BOXED.finditer(data)]
    for start, end in _brackets(data):
        if data[start - 1 : start] == b"@":  # @[a, b]: an array, as an initializer list
            found += [(start, b"{"), (end, b"}")]
        else:
            found += _send(data, start, end)
    return found


def _brackets(data: bytes) -> list[tuple[int, int]]:
    """(offset of '[', offset of its ']') of every balanced bracket pair in code."""
    stack: list[int] = []
    pairs = []
    for match in _TOKENS.finditer(data):
        token = match.group(0)
        if token == b"[":
            stack.append(match.start())
        elif token == b"]" and stack:
            pairs.append((stack.pop(), match.start()))
    return pairs


def _send(data: bytes, start: int, end: int) -> list[tuple[int, bytes]]:
    """The rewrites of the bracket pair at [start, end] if it is a message send."""
    inner = bytearray(_STRING.sub(lambda m: b"S" * len(m.group(0)), data[start + 1 : end]))
    # Nested brackets (sends, subscripts, lambdas' captures) are the receiver's or an
    # argument's business: masked, so only this send's own selector is seen.
    depth = 0
    for index, byte in enumerate(inner):
        if byte == 0x5B:  # [
            depth += 1
            inner[index] = 0x52  # R
        elif byte == 0x5D:  # ]
            depth -= 1
            inner[index] = 0x52
        elif depth:  # newlines too: a receiver [[X alloc] init...] may span lines
            inner[index] = 0x52
    match = _SEND.match(inner)
    if match is None:
        return []
    rewrites = [(start, b"("), (end, b")")]
    first = match.start(1)
    if match.group(2) != b":":  # a unary message: [obj count]
        rewrites.append((start + 1 + first, b" " * (match.end(1) - first)))
        return rewrites
    for part in _SELECTOR_PART.finditer(inner, first):
        name_start, colon = part.start(1), part.end() - 1
        rewrites.append((start + 1 + name_start, b" " * (colon - name_start) + b","))
    return rewrites
