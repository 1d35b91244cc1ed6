"""Same-length blanking of the tokens tree-sitter-cpp cannot parse, before parsing.

tree-sitter-cpp knows nothing of CUDA (``__global__``, ``kernel<<<grid, block>>>(...)``)
nor of PyTorch's attribute macros (``class TORCH_API Foo``, ``C10_HOST_DEVICE``), and
recovers from them with ERROR nodes that can swallow whole classes. Replacing each such
token by as many spaces keeps every byte offset, line and column, so the parse of the
prepared bytes reports positions of the original file. What was blanked is remembered:
``__global__`` / ``__device__`` positions make kernels and device functions, and the
``<<<`` positions make launch sites.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_CUDA_QUALIFIERS = (
    "__global__",
    "__device__",
    "__host__",
    "__forceinline__",
    "__noinline__",
    "__shared__",
    "__constant__",
    "__managed__",
    "__grid_constant__",
)

# Object-like macros that expand to attributes (or nothing) in PyTorch and its extensions.
_ATTRIBUTE_MACROS = (
    "C10_HOST",
    "C10_ALWAYS_INLINE",
    "C10_ALWAYS_INLINE_ATTRIBUTE",
    "C10_NOINLINE",
    "C10_UNUSED",
    "C10_NODISCARD",
    "C10_EXPORT",
    "C10_IMPORT",
    "C10_HIDDEN",
    "C10_DEPRECATED",
    "C10_RESTRICT",
    "C10_HOST_CONSTEXPR",
    "C10_HOST_CONSTEXPR_VAR",
    "C10_HOST_CONSTEXPR_EXCEPT_WIN_CUDA",
    "C10_CONSTEXPR_EXCEPT_WIN_CUDA",
    "C10_LAUNCH_BOUNDS_0",
    "GPU_LAMBDA",
    "RESTRICT",
    "__at_align__",
    "__ubsan_ignore_undefined__",
    "__ubsan_ignore_signed_int_overflow__",
    "__ubsan_ignore_float_divide_by_zero__",
    "__ubsan_ignore_pointer_overflow__",
    "__ubsan_ignore_function__",
)

# Function-like attribute macros: the name and its (possibly nested once) argument list.
_ATTRIBUTE_CALLS = (
    "__launch_bounds__",
    "C10_LAUNCH_BOUNDS_1",
    "C10_LAUNCH_BOUNDS_2",
    "C10_DEPRECATED_MESSAGE",
)

_BLANK = re.compile(
    rb"(?<!define )\b(?:"
    rb"(?P<cuda>" + "|".join((*_CUDA_QUALIFIERS, "C10_HOST_DEVICE", "C10_DEVICE")).encode() + rb")"
    rb"|(?:" + "|".join(_ATTRIBUTE_CALLS).encode() + rb")\s*\((?:[^()]|\([^()]*\))*\)"
    rb"|" + "|".join(_ATTRIBUTE_MACROS).encode() + rb"|[A-Z][A-Z0-9_]*_API"
    rb")\b"
    # A launch configuration; it never spans a statement or a block.
    rb"|(?P<launch><<<)[^;{}]*?>>>"
)
_NEEDLES = (b"__", b"_API", b"C10_", b"GPU_LAMBDA", b"RESTRICT", b"<<<")


@dataclass(slots=True)
class Prepared:
    """The bytes to parse, and the offsets of what was blanked in them."""

    data: bytes
    global_at: list[int] = field(default_factory=list)  # offsets of `__global__`
    device_at: list[int] = field(default_factory=list)  # offsets of `__device__`
    host_at: list[int] = field(default_factory=list)  # offsets of `__host__`
    host_device_at: list[int] = field(default_factory=list)  # offsets of `C10_HOST_DEVICE`
    launch_at: list[int] = field(default_factory=list)  # offsets of `<<<`


def prepare(data: bytes) -> Prepared:
    """Blank CUDA qualifiers, attribute macros and launch configurations to spaces."""
    if not any(needle in data for needle in _NEEDLES):
        return Prepared(data)
    prepared = Prepared(data)
    kinds = {
        b"__global__": prepared.global_at,
        b"__device__": prepared.device_at,
        b"__host__": prepared.host_at,
        b"C10_DEVICE": prepared.device_at,
        b"C10_HOST_DEVICE": prepared.host_device_at,
    }

    def blank(match: re.Match[bytes]) -> bytes:
        text = match.group(0)
        if match.group("launch"):
            prepared.launch_at.append(match.start())
        elif match.group("cuda"):
            offsets = kinds.get(text)
            if offsets is not None:
                offsets.append(match.start())
        # Newlines stay, so lines keep their numbers even when a blanked span wraps.
        return re.sub(rb"[^\n]", b" ", text) if b"\n" in text else b" " * len(text)

    prepared.data = _BLANK.sub(blank, data)
    return prepared
