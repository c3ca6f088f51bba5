"""Historical attention (HAViT Eq. 5-7) for the softmax attention layers.

A softmax attention module built with ``history=dict(alpha=..., init=...)`` owns a
:class:`HistoricalAttention`: it mixes its logits with the mixed logits ``H`` of
the previous historical layer (``MixerState.history``), attends with the mix and
hands the mix on in the state; a backbone restarts the state at each stage. Readings of the paper: docs/design.md
("Historical attention (HAViT)").
"""
import torch
import torch.nn as nn

from mmhybrid.ops import historical_attention, historical_attention_macs
from mmhybrid.ops.heads import acc_dtype
from mmhybrid.ops.historical_attention.initial import fixed_history

INITS = ('random', 'zero')


class HistoricalAttention(nn.Module):
    """Parameter-free HAViT attention on (B, heads, N, d) q, k, v; owns ``H_0``.

    Args:
        num_heads (int): heads of the attention (the history is heads x N x N).
        alpha (float): weight of the layer's own logits in Eq. 5; 0.45 is the
            paper's best, 1 is plain softmax attention.
        init (str): ``H_0`` where a chain of historical layers starts:
            ``'random'`` (standard normal, the paper's best) or ``'zero'``.
        resample (bool): in training, draw a new per-sample random ``H_0`` at
            every forward pass (the reference implementation). Evaluation always
            uses a fixed ``H_0`` (see :meth:`initial_history`); False uses that
            fixed one in training too.
        seed (int): seed of the fixed ``H_0``.

    Attributes:
        keep (bool): return the new history. :func:`link_history` clears it on
            the last layer of a chain, where no layer would read it.
    """

    def __init__(self, num_heads, alpha=0.45, init='random', resample=True,
                 seed=0):
        super().__init__()
        if not 0 <= alpha <= 1:
            raise ValueError(f'history alpha must be in [0, 1], got {alpha}')
        if init not in INITS:
            raise ValueError(f'history init must be one of {INITS}, got {init!r}')
        self.num_heads = num_heads
        self.alpha = float(alpha)
        self.init = init
        self.resample = resample
        self.seed = seed
        self.keep = True

    def extra_repr(self):
        return (f'alpha={self.alpha}, init={self.init!r}, '
                f'resample={self.resample}, keep={self.keep}')

    def initial_history(self, batch, num_tokens, device, dtype=torch.float32):
        """``H_0`` for ``num_tokens`` tokens: None (zero), a per-sample draw
        (training with ``resample``), or the fixed one.

        The fixed ``H_0`` (1, heads, N, N) is
        :func:`~mmhybrid.ops.historical_attention.initial.normal_history` of
        ``seed``: standard normals that depend on (seed, head, i, j) only, the
        same for every call, batch, device and exporter (eager calls reuse it for
        the last shape, traced graphs compute it).
        """
        if self.init == 'zero':
            return None
        if self.training and self.resample:
            return torch.randn(batch, self.num_heads, num_tokens, num_tokens,
                               device=device)
        return fixed_history(self.seed, self.num_heads, num_tokens, device, dtype)

    def macs(self, q, k, v, history=None, scale=None, dropout_p=0.):
        """The op of a historical layer, whichever backend runs it
        (:func:`~mmhybrid.ops.historical_attention_macs`). The history mixed in
        is the incoming one, else ``H_0`` (none for ``init='zero'``); with
        ``alpha = 1`` nothing is mixed (the blocked op skips it)."""
        B, H, N, d = q.shape
        starts = history is None or history.shape[1:] != (H, N, N)
        mixed = self.alpha < 1 and not (starts and self.init == 'zero')
        return historical_attention_macs(B, H, N, d, v.shape[-1], mixed)

    def forward(self, q, k, v, history=None, scale=None, dropout_p=0.):
        """Returns ``(out, new_history)``; a ``history`` of another shape (or None)
        starts a new chain from ``H_0``."""
        B, H, N, _ = q.shape
        if history is None or history.shape[1:] != (H, N, N):
            history = self.initial_history(B, N, q.device, acc_dtype(q))
        return historical_attention(q, k, v, history, alpha=self.alpha,
                                    scale=scale, dropout_p=dropout_p,
                                    return_history=self.keep)


def link_history(blocks):
    """Chain the historical blocks of one stage (in order): each keeps its new
    history only if the next historical block has the same heads and reads it."""
    chain = [b.attn.historical for b in blocks
             if getattr(b.attn, 'historical', None) is not None]
    for current, following in zip(chain, chain[1:] + [None]):
        current.keep = (following is not None
                        and following.num_heads == current.num_heads)
