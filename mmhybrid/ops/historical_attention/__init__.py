"""Historical attention (HAViT, Banik et al.) as a functional op.

:func:`historical_attention` mixes the scaled logits of a layer with the mixed
logits ``H`` of the previous one (Eq. 5), applies softmax attention to the mix
(Eq. 7) and hands the mix on as the next history (Eq. 6). It needs the explicit
N x N logits, so FlashAttention / ``F.scaled_dot_product_attention`` cannot run
it. ``torch`` (alias ``chunk``, the default) works in query blocks with a
block-wise backward, so the only N x N tensor is the history itself; ``naive`` is
the reference for tests. The choice follows :mod:`mmhybrid.ops.dispatch`.
"""
from ..dispatch import choose_backend
from ..heads import check_heads
from .chunk import chunk_historical_attention
from .naive import naive_historical_attention

BACKENDS = {'torch': chunk_historical_attention, 'chunk': chunk_historical_attention,
            'naive': naive_historical_attention}


def historical_attention(q, k, v, history=None, alpha=0.45, scale=None,
                         dropout_p=0., return_history=True, backend=None):
    r"""One HAViT attention, :math:`\mathrm{softmax}(\alpha Q K^T s + (1-\alpha) H) V`.

    Args:
        q, k, v (Tensor): (B, heads, N, d) (``v`` may have its own last dim).
        history (Tensor, optional): the previous layer's mixed logits, (B, heads,
            N, N) or (1, heads, N, N) shared by the batch; None is ``H = 0``.
        alpha (float): weight of the current logits, in [0, 1].
        scale (float, optional): logit scale ``s``, default ``d ** -0.5``.
        dropout_p (float): dropout on the attention probabilities.
        return_history (bool): return the new history; False saves its N x N
            memory where no later layer reads it.
        backend (str, optional): ``'torch'``/``'chunk'`` (automatic) or ``'naive'``.
    Returns:
        tuple: output (B, heads, N, d_v) in the dtype of ``v``, and the new history
        (B, heads, N, N), None unless ``return_history`` (``chunk`` keeps it in
        fp32, or fp64 for fp64 inputs).
    """
    check_heads(q, k, v)
    B, H, N, _ = q.shape
    if history is not None and (history.dim() != 4 or history.shape[0] not in (1, B)
                                or history.shape[1:] != (H, N, N)):
        raise ValueError(f'history must be ({B} or 1, {H}, {N}, {N}) for q of '
                         f'shape {tuple(q.shape)}; got {tuple(history.shape)}')
    if not 0 <= alpha <= 1:
        raise ValueError(f'alpha must be in [0, 1], got {alpha}')
    fn = BACKENDS[choose_backend('historical_attention', BACKENDS, lambda: 'torch',
                                 backend)]
    return fn(q, k, v, history, alpha=alpha, scale=scale, dropout_p=dropout_p,
              return_history=return_history)


def historical_attention_macs(batch, heads, tokens, key_dim, value_dim,
                              mixed=True):
    r"""HAViT Eq. 5-7: ``Q K^T`` and ``A V`` (``N^2 (d + d_v)`` per head, as
    softmax attention counts them) and, where a history is mixed in, one
    multiply-add per logit for ``A = alpha Q K^T s + (1 - alpha) H`` (the scale
    ``alpha s`` is folded into Q, like attention's own scale, and not counted).

    Returns:
        dict: ``{'attention': ..., 'history': ...}`` (no ``'history'`` if not mixed).
    """
    pairs = batch * heads * tokens * tokens
    macs = {'attention': pairs * (key_dim + value_dim)}
    if mixed:
        macs['history'] = pairs
    return macs


__all__ = [
    'historical_attention', 'chunk_historical_attention',
    'naive_historical_attention', 'historical_attention_macs'
]
