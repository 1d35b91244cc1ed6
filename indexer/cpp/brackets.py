"""The ')' that closes a '(' in C++ text (str or bytes), string and character literals
skipped: macro uses, schema strings, declarations read by text rather than by a parse."""

from __future__ import annotations

import re
from typing import AnyStr

_TOKENS_STR = re.compile(r"[()]|\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'")
_TOKENS_BYTES = re.compile(rb"[()]|\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'")
_OPEN = {str: "(", bytes: b"("}
_CLOSE = {str: ")", bytes: b")"}


def closing_paren(text: AnyStr, open_at: int, limit: int | None = None) -> int:
    """Offset of the ')' matching the '(' at ``open_at``, looking at most ``limit``
    characters ahead; -1 if it is not closed (in reach)."""
    tokens = _TOKENS_BYTES if isinstance(text, bytes) else _TOKENS_STR
    opening, closing = _OPEN[type(text)], _CLOSE[type(text)]
    end = len(text) if limit is None else min(len(text), open_at + limit)
    depth = 0
    for match in tokens.finditer(text, open_at, end):
        token = match.group(0)
        if token == opening:
            depth += 1
        elif token == closing:
            depth -= 1
            if depth == 0:
                return match.start()
    return -1
