"""tinyops: a small PyTorch C++/CUDA extension, the example project of `torchtalk demo`."""

from tinyops.layers import Scale
from tinyops.ops import clamp_abs, scale

__all__ = ["Scale", "clamp_abs", "scale"]
