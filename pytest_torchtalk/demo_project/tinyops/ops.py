"""The ops csrc/ops.cpp registers, called through the dispatcher."""

try:
    import torch
except ImportError:  # the package imports without torch; its ops need it
    torch = None


def scale(x, factor):
    """``x * factor``, by the extension's kernel (CPU or CUDA)."""
    return torch.ops.tinyops.scale(x, factor)


def clamp_abs(x, limit):
    """``x`` clamped to ``[-limit, limit]``."""
    return torch.ops.tinyops.clamp_abs(x, limit)
