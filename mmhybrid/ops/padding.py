"""Zero padding whose amounts come from the input's size.

Eager PyTorch skips a pad of nothing (no copy). Under a graph tracer the pad
always runs, its amounts integer arithmetic on the symbolic sizes, so that one
exported graph serves every input size instead of the export size's decision.
"""
import torch.nn.functional as F

from .tracing import is_tracing


def pad_if_needed(x, pad):
    """``F.pad(x, pad)`` (zeros), skipped in eager calls where every amount is 0."""
    if is_tracing() or any(pad):  # the tracer test first: no guard on the sizes
        return F.pad(x, pad)
    return x
