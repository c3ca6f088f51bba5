"""Matrix products over (B, heads) batches of head views, without copies."""
import torch


def head_matmul(a, b, dtype=None):
    """``a @ b`` for (B, heads, m, n) tensors, optionally computed in ``dtype``.

    Per-head tensors of our layers are views of a (B, N, heads * d) projection:
    their (B, heads) dims do not flatten to one stride, so ``torch.matmul`` copies
    the whole N x d operand to batch it. One ``bmm`` per batch element reads each
    (heads, N, d) strided batch in place (BLAS takes the row stride as leading
    dimension). With ``dtype`` the operands are cast one batch element at a time.
    """
    return torch.stack([torch.bmm(x if dtype is None else x.to(dtype),
                                  y if dtype is None else y.to(dtype))
                        for x, y in zip(a.unbind(0), b.unbind(0))])
