"""Global softmax attention ('S' layers of SoLA-Vision, softmax layers of InfViT
and HAViT, the vanilla / 'global' blocks of the ELFATT backbones)."""
from mmhybrid.ops.attention import softmax_attention
from mmhybrid.registry import MIXERS
from ..historical_attention import HistoricalAttention
from .base import AttentionMixer, from_heads, to_heads


@MIXERS.register_module(name='softmax')
class SoftmaxAttention(AttentionMixer):
    """``softmax(QK^T / sqrt(d)) V`` over all tokens (FlashAttention where
    :func:`~mmhybrid.ops.attention.softmax_attention` can use it).

    With ``history`` (HAViT Eq. 5-7, see
    :class:`~mmhybrid.layers.HistoricalAttention`) the logits are mixed with the
    previous historical layer's, read from and written to ``state.history``.

    Args:
        history (dict, optional): :class:`HistoricalAttention` arguments.
        **kwargs: see :class:`AttentionMixer`.
    """
    letter = 'S'
    reads_grid = False  # any set of tokens (a class token too)

    def __init__(self, dims, num_heads, history=None, **kwargs):
        super().__init__(dims, num_heads, **kwargs)
        if history is not None and not isinstance(history, dict):
            raise TypeError(f'history must be None or a dict of HistoricalAttention '
                            f'arguments (alpha, init, resample, seed), got {history!r}')
        self.historical = (None if history is None else
                           HistoricalAttention(num_heads, **history))

    def attend(self, q, k, v, hw_shape, state):
        q, k, v = (to_heads(t, self.num_heads) for t in (q, k, v))
        if self.historical is None:
            out = softmax_attention(q, k, v, dropout_p=self.dropout_p,
                                    scale=self.scale)
            return from_heads(out), state
        out, history = self.historical(q, k, v, state.history, scale=self.scale,
                                       dropout_p=self.dropout_p)
        return from_heads(out), state._replace(history=history)
