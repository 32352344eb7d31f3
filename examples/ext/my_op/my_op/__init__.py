"""my_op: ``axpby(x, y, a, b) = a * x + b * y`` computed by a CUDA kernel."""

from __future__ import annotations

import torch

from my_op import _C

__all__ = ["axpby"]


def axpby(x: torch.Tensor, y: torch.Tensor, a: float = 1.0, b: float = 1.0) -> torch.Tensor:
    """Return ``a * x + b * y`` for two float32 CUDA tensors of the same shape."""
    return _C.axpby(x, y, float(a), float(b))
