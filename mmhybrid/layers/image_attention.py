"""Multi-head self-attention on the tokens of an image, with LePE (CSWin).

:class:`ImageAttention` owns the parameters every attention type shares (``qkv``,
``lepe``, ``proj``); subclasses only say how tokens attend (:meth:`attend`). That
keeps checkpoints interchangeable between attention types of one backbone.
"""
import torch.nn as nn

from mmhybrid.ops.attention import softmax_attention

from .historical_attention import build_history


def to_heads(x, num_heads):
    """(B, N, heads * d) -> (B, heads, N, d)."""
    B, N, _ = x.shape
    return x.view(B, N, num_heads, -1).transpose(1, 2)


def from_heads(x):
    """(B, heads, N, d) -> (B, N, heads * d)."""
    B, _, N, _ = x.shape
    return x.transpose(1, 2).reshape(B, N, -1)


class ImageAttention(nn.Module):
    r"""``proj(Attention(Q, K, V) + L(V))`` on (B, H*W, C) tokens.

    ``L`` is LePE (Dong et al. 2022; ELFATT Eq. 10-11): a 3x3 depth-wise conv of V
    on the image grid. Being depth-wise, one conv over all C channels is exactly
    ``[L(V_bar), L(V_tilde)]`` of Eq. 11 with separate weights per head.

    Args:
        dims (int): channels C.
        num_heads (int): heads.
        qkv_bias (bool): bias of the ``qkv`` projection.
        qk_scale (float, optional): softmax logit scale, ``head_dim ** -0.5`` if None.
        attn_drop (float): dropout on softmax attention weights (training only).
        proj_drop (float): dropout after ``proj``.
        lepe (bool): add the LePE term.
    """

    def __init__(self, dims, num_heads, qkv_bias=True, qk_scale=None,
                 attn_drop=0., proj_drop=0., lepe=True):
        super().__init__()
        if dims % num_heads:
            raise ValueError(f'dims {dims} not divisible by num_heads {num_heads}')
        self.dims = dims
        self.num_heads = num_heads
        self.scale = qk_scale
        self.attn_drop = attn_drop
        self.qkv = nn.Linear(dims, dims * 3, bias=qkv_bias)
        self.lepe = nn.Conv2d(dims, dims, 3, padding=1, groups=dims) if lepe else None
        self.proj = nn.Linear(dims, dims)
        self.proj_drop = nn.Dropout(proj_drop)

    @property
    def dropout_p(self):
        return self.attn_drop if self.training else 0.

    def attend(self, q, k, v, hw_shape):
        """(B, N, C) queries, keys, values -> (B, N, C) attention output."""
        raise NotImplementedError

    def positional(self, v, hw_shape):
        """LePE term L(V) on the whole image, (B, N, C)."""
        B, N, C = v.shape
        v = v.transpose(1, 2).reshape(B, C, *hw_shape)
        return self.lepe(v).flatten(2).transpose(1, 2)

    def forward(self, x, hw_shape):
        B, N, C = x.shape
        q, k, v = self.qkv(x).view(B, N, 3, C).unbind(2)
        return self.project_out(self.attend(q, k, v, hw_shape), v, hw_shape)

    def project_out(self, out, v, hw_shape):
        """Adds LePE of ``v`` to the attention output, then ``proj``."""
        if self.lepe is not None:
            out = out + self.positional(v, hw_shape)
        return self.proj_drop(self.proj(out))


class GlobalAttention(ImageAttention):
    """Vanilla softmax attention over all tokens (VaniATT / the 'global' baseline).

    :func:`~mmhybrid.ops.attention.softmax_attention` picks FlashAttention on GPU.
    With ``history`` (HAViT, see :class:`~mmhybrid.layers.HistoricalAttention`)
    the logits are mixed with the previous layer's and :meth:`forward` takes and
    returns the history.
    """

    def __init__(self, dims, num_heads, history=None, **kwargs):
        super().__init__(dims, num_heads, **kwargs)
        self.historical = build_history(history, num_heads)

    def forward(self, x, hw_shape, history=None):
        if self.historical is None:
            return super().forward(x, hw_shape)
        B, N, C = x.shape
        q, k, v = self.qkv(x).view(B, N, 3, C).unbind(2)
        out, history = self.historical(
            *(to_heads(t, self.num_heads) for t in (q, k, v)), history,
            scale=self.scale, dropout_p=self.dropout_p)
        return self.project_out(from_heads(out), v, hw_shape), history

    def attend(self, q, k, v, hw_shape):
        q, k, v = (to_heads(t, self.num_heads) for t in (q, k, v))
        out = softmax_attention(q, k, v, dropout_p=self.dropout_p, scale=self.scale)
        return from_heads(out)
