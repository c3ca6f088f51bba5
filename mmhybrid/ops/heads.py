"""(B, heads, N, d) head views: the shape check of the attention ops, matrix
products over (B, heads) batches without copies, the row blocks that bound the
memory of the block-wise ops, and the dtype they accumulate in."""
import torch

from .tracing import is_tracing


def check_heads(q, k, v):
    """Raise unless q, k are (B, heads, N, d) and v (B, heads, N, dv); ``k=None``
    (the tied form of some ops) is not checked."""
    if (q.dim() != 4 or q.shape[:3] != v.shape[:3]
            or (k is not None and k.shape != q.shape)):
        raise ValueError(f'q, k must be (B, heads, N, d) and v (B, heads, N, dv); got '
                         f'{tuple(q.shape)}, {k if k is None else tuple(k.shape)}, '
                         f'{tuple(v.shape)}')


def head_matmul(a, b, dtype=None):
    """``a @ b`` for (B, heads, m, n) tensors, optionally computed in ``dtype``.

    Per-head tensors of our layers are views of a (B, N, heads * d) projection:
    their (B, heads) dims do not flatten to one stride, so ``torch.matmul`` copies
    the whole N x d operand to batch it. One ``bmm`` per batch element reads each
    (heads, N, d) strided batch in place (BLAS takes the row stride as leading
    dimension). With ``dtype`` the operands are cast one batch element at a time.
    Traced (ONNX export, torch.compile, torch.export) it is one ``matmul``: a
    graph must serve every batch size, and a loop over the batch would be unrolled
    into the traced one.
    """
    if is_tracing():
        return torch.matmul(a if dtype is None else a.to(dtype),
                            b if dtype is None else b.to(dtype))
    return torch.stack([torch.bmm(x if dtype is None else x.to(dtype),
                                  y if dtype is None else y.to(dtype))
                        for x, y in zip(a.unbind(0), b.unbind(0))])


def acc_dtype(x):
    """The accumulation dtype of the ops: float64 for float64, else float32."""
    return torch.promote_types(x.dtype, torch.float32)


def spans(N, size):
    """(start, stop) of the consecutive pieces of ``size`` rows (the last may be
    shorter) of N."""
    return [(start, min(start + size, N)) for start in range(0, N, size)]


def rows_per_block(q, k, block_elements):
    """How many query rows of (B, heads, N, d) ``q`` against ``k``'s keys make a
    (B, heads, rows, N_k) block of at most ``block_elements`` numbers (one at least)."""
    B, H, N, _ = q.shape
    return max(1, min(N, block_elements // max(B * H * k.shape[-2], 1)))
