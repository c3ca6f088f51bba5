"""The base of the attention token mixers: projections, heads, LePE, output."""
import torch.nn as nn
import torch.nn.functional as F

from mmhybrid.ops.streaming import map_to_tokens, tokens_to_map

from ..block import MixerState
from ..inherit import Inherited, copy_linear, start_lepe_at_zero


def to_heads(x, num_heads):
    """(B, N, heads * d) -> (B, heads, N, d)."""
    B, N, _ = x.shape
    return x.view(B, N, num_heads, -1).transpose(1, 2)


def from_heads(x):
    """(B, heads, N, d) -> (B, N, heads * d)."""
    B, _, N, _ = x.shape
    return x.transpose(1, 2).reshape(B, N, -1)


def conv_in_windows(x, window, weight, bias):
    """The depth-wise 3x3 conv ``weight`` inside each ``window`` of (..., n * wh *
    ww, C) window-major tokens (LePE inside a window or stripe)."""
    C = x.shape[-1]
    out = F.conv2d(x.reshape(-1, *window, C).permute(0, 3, 1, 2), weight, bias,
                   padding=1, groups=C)
    return out.permute(0, 2, 3, 1).reshape(x.shape)


class AttentionMixer(nn.Module):
    r"""``proj(Attention(Q, K, V) + L(V))`` on (B, H*W, C) tokens.

    Owns what every attention shares: the fused ``qkv`` projection, the optional
    LePE ``L`` (Dong et al. 2022; ELFATT Eq. 10-11: a 3x3 depth-wise conv of V on
    the image grid; being depth-wise, one conv over all channels is exactly
    ``[L(V_bar), L(V_tilde)]`` of Eq. 11 with separate weights per head) and the
    output projection. A subclass writes only :meth:`attend`, so checkpoints are
    interchangeable between the attention types of one backbone.

    Args:
        dims (int): channels C.
        num_heads (int): heads.
        head_dim (int, optional): channels per head; default ``dims // num_heads``
            (otherwise q, k, v are ``num_heads * head_dim`` wide).
        qkv_bias (bool): bias of ``qkv``.
        qk_scale (float, optional): logit scale, ``head_dim ** -0.5`` if None.
        attn_drop (float): dropout on attention weights (training only).
        proj_drop (float): dropout after ``proj``.
        lepe (bool): add the LePE term.
    """

    def __init__(self, dims, num_heads, head_dim=None, qkv_bias=True, qk_scale=None,
                 attn_drop=0., proj_drop=0., lepe=False):
        super().__init__()
        if head_dim is None and dims % num_heads:
            raise ValueError(f'dims {dims} not divisible by num_heads {num_heads}')
        inner = dims if head_dim is None else num_heads * head_dim
        self.dims = inner
        self.num_heads = num_heads
        self.scale = qk_scale
        self.attn_drop = attn_drop
        self.qkv = nn.Linear(dims, inner * 3, bias=qkv_bias)
        self.lepe = (nn.Conv2d(inner, inner, 3, padding=1, groups=inner)
                     if lepe else None)
        self.proj = nn.Linear(inner, dims)
        self.proj_drop = nn.Dropout(proj_drop)

    @property
    def dropout_p(self):
        return self.attn_drop if self.training else 0.

    def attend(self, q, k, v, hw_shape, state):
        """(B, N, C) queries, keys, values -> ((B, N, C) output, state)."""
        raise NotImplementedError

    def positional(self, v, hw_shape):
        """LePE term L(V) on the whole image, (B, N, C)."""
        return map_to_tokens(self.lepe(tokens_to_map(v, hw_shape)))

    def attention(self, x, hw_shape, state):
        """``Attention(Q, K, V) + L(V)``, (B, N, inner). The fused q, k, v are
        this method's locals: freed when it returns, before ``proj`` allocates."""
        B, N, _ = x.shape
        q, k, v = self.qkv(x).view(B, N, 3, self.dims).unbind(2)
        out, state = self.attend(q, k, v, hw_shape, state)
        if self.lepe is not None:
            out = out + self.positional(v, hw_shape)
        return out, state

    def inherit_softmax(self, attn):
        """Start from a softmax attention's tensors (:class:`SoftmaxWeights`):
        ``qkv`` and ``proj`` copied, heads kept (another number of heads is
        another function: an error), a LePE at zero (its branch adds nothing);
        a relative-position-bias table has no place (a subclass with one takes
        it)."""
        if attn.num_heads is not None and attn.num_heads != self.num_heads:
            raise ValueError(f'{type(self).__name__} has {self.num_heads} heads, '
                             f'the teacher layer {attn.num_heads}')
        result = Inherited({}, 'qkv, proj')
        copy_linear(result, 'qkv', self.qkv, attn.qkv)
        copy_linear(result, 'proj', self.proj, attn.proj)
        return start_lepe_at_zero(result, self.lepe, attn)

    def forward(self, x, hw_shape, state=MixerState()):
        out, state = self.attention(x, hw_shape, state)
        return self.proj_drop(self.proj(out)), state
