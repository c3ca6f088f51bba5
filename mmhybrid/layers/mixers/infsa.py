"""Multi-head Infinite Self-Attention (Roffo & Palmer, Sec. 3.2 and 3.4).

Both variants scale every head by a discount ``gamma`` in (0, 1), learnt through a
sigmoid as a (heads,) tensor (so it receives gradients):

* ``'pure'`` (Eq. 11-12): ``Z = gamma ReLU(QK^T/sqrt(d)) / (||.||_F + eps) V``.
* ``'linear'`` (Eq. 16-21): the pooled context ``h = sum_t gamma a_t V_t`` (``w =
  gamma a``) with tied ``Q = K`` by default, broadcast to every token after the
  output projection (computed once per image, not per token).

Eq. 9 / 23's depth discount, ``sum_t gamma^t A^(t) ... A^(1) X``: with the default
``discount='layer'`` every layer applies its gamma once, as the public code does
with its per-layer ``rho``, and a path through t attention layers of the Pre-LN
residual stack (the accumulator) collects ``gamma^t`` by composition.
``discount='depth'`` is the literal reading instead: a pure layer at depth ``t``
scales its own output by ``gamma^t`` (0.7^24 = 2e-4 for the 24th layer at
initialisation; see docs/design.md, "InfViT").

``local_path='lepe'`` adds a 3x3 depth-wise convolution of V (CSWin's locally
enhanced positional encoding) to the head outputs before the projection, a
per-token term that the broadcast linear context lacks (mmhybrid's addition for
dense prediction; see docs/infvit.md).
"""
import math

import torch
import torch.nn as nn

from mmhybrid.ops import pure_infsa
from mmhybrid.ops.infsa import linear_infsa_context
from mmhybrid.ops.streaming import map_to_tokens, tokens_to_map
from mmhybrid.registry import MIXERS
from ..block import MixerState
from ..inherit import Inherited, copy_linear, start_lepe_at_zero
from .base import from_heads, to_heads


class InfSAttention(nn.Module):
    """InfSA token mixer on (B, N, C) tokens of an ``hw_shape`` map.

    Args:
        dims (int): channels. num_heads (int): heads; ``dims`` must divide.
        variant (str): ``'pure'`` or ``'linear'``.
        tie_qk (bool, optional): share the query and key projection; default True
            for ``'linear'`` (the paper's form), False for ``'pure'``.
        gamma_init (float): initial discount (Table 4 picks 0.7).
        depth (int): 1-based layer depth ``t`` in the backbone.
        discount (str): ``'layer'`` scales the output by gamma; ``'depth'``
            scales a pure layer's output by gamma^t (linear layers: gamma).
        local_path (str, optional): None or ``'lepe'``.
        eps (float): the epsilon of Eq. 11 and 17/20.

    ``forward`` returns ``(out, state)``, ``out`` (B, N, C), or (B, 1, C) for a
    linear layer without local path (the same context for every token; it
    broadcasts in the residual add).
    """
    reads_grid = False  # the class token takes part; LePE skips it
    no_weight_decay = ('gamma_logit', )

    def __init__(self, dims, num_heads, variant='pure', tie_qk=None,
                 qkv_bias=True, gamma_init=0.7, depth=1, discount='layer',
                 local_path=None, eps=1e-6):
        super().__init__()
        for name, value, valid in (('variant', variant, ('pure', 'linear')),
                                   ('discount', discount, ('layer', 'depth')),
                                   ('local_path', local_path, (None, 'lepe'))):
            if value not in valid:
                raise ValueError(f'unknown InfSA {name} {value!r}; use {valid}')
        if dims % num_heads or not 0 < gamma_init < 1 or depth < 1:
            raise ValueError(f'InfSA needs num_heads ({num_heads}) dividing dims '
                             f'({dims}), 0 < gamma_init < 1 and depth >= 1, got '
                             f'{gamma_init}, {depth}')
        self.variant = variant
        self.num_heads = num_heads
        self.depth = depth
        self.discount = discount
        self.eps = eps
        self.gamma_init = gamma_init
        self.tie_qk = variant == 'linear' if tie_qk is None else tie_qk
        self.q = nn.Linear(dims, dims, bias=qkv_bias)
        self.k = None if self.tie_qk else nn.Linear(dims, dims, bias=qkv_bias)
        self.v = nn.Linear(dims, dims, bias=qkv_bias)
        self.gamma_logit = nn.Parameter(
            torch.full((num_heads, ), math.log(gamma_init / (1 - gamma_init))))
        self.lepe = (nn.Conv2d(dims, dims, 3, padding=1, groups=dims)
                     if local_path == 'lepe' else None)
        self.proj = nn.Linear(dims, dims)

    @property
    def gamma(self):
        """(heads,) discount in (0, 1)."""
        return torch.sigmoid(self.gamma_logit)

    @property
    def power(self):
        """The exponent of gamma in this layer's output scale."""
        return self.depth if self.discount == 'depth' and self.variant == 'pure' else 1

    def inherit_softmax(self, attn):
        """Start from a softmax attention: ``q``, ``k`` (untied; tied Q = K
        drops the teacher's k), ``v`` and ``proj`` copied, ``gamma`` at
        ``gamma_init``, a LePE local path at zero."""
        result = Inherited({}, 'q, k, v, proj' if self.k is not None else 'q, v, proj')
        copy_linear(result, 'q', self.q, attn.q)
        if self.k is not None:
            copy_linear(result, 'k', self.k, attn.k)
        else:
            result.dropped['k.weight, k.bias'] = 'tied Q = K'
        copy_linear(result, 'v', self.v, attn.v)
        copy_linear(result, 'proj', self.proj, attn.proj)
        result.new['gamma_logit'] = f'gamma_init {self.gamma_init}'
        return start_lepe_at_zero(result, self.lepe, attn)

    def forward(self, x, hw_shape, state=MixerState()):
        q = to_heads(self.q(x), self.num_heads)
        k = q if self.k is None else to_heads(self.k(x), self.num_heads)
        v_tokens = self.v(x)
        v = to_heads(v_tokens, self.num_heads)
        op = pure_infsa if self.variant == 'pure' else linear_infsa_context
        out = from_heads(op(q, k, v, eps=self.eps) *
                         self.gamma.pow(self.power).to(v.dtype)[:, None, None])
        if self.lepe is not None:  # on the spatial tokens (the last H*W); extra: 0
            extra = x.shape[1] - hw_shape[0] * hw_shape[1]
            local = map_to_tokens(self.lepe(tokens_to_map(v_tokens[:, extra:],
                                                          hw_shape)))
            out = out + torch.cat((local.new_zeros(x.shape[0], extra, local.shape[2]),
                                   local), dim=1)
        return self.proj(out), state


@MIXERS.register_module(name='pure_infsa')
class PureInfSA(InfSAttention):
    """Pure InfSA (Eq. 11-12), O(N^2) compute with no N x N tensor kept."""
    letter = 'P'

    def __init__(self, dims, num_heads, **kwargs):
        super().__init__(dims, num_heads, variant='pure', **kwargs)


@MIXERS.register_module(name='linear_infsa')
class LinearInfSA(InfSAttention):
    """Linear InfSA (Eq. 16-21), O(N): one pooled context per image."""
    letter = 'I'

    def __init__(self, dims, num_heads, **kwargs):
        super().__init__(dims, num_heads, variant='linear', **kwargs)
