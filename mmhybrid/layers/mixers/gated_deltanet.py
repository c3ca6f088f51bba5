r"""Bidirectional Gated DeltaNet token mixer ('G' in a schedule).

Gated DeltaNet (Yang et al. 2025) as InfiniteVL uses it (Sec. 3.1-3.2): q, k, v
projections without bias, a short depth-wise conv and SiLU, L2-normalised q and k,
``beta = sigmoid(W_b x)``, the Mamba-2 decay ``g = -exp(A_log) softplus(W_a x +
dt_bias)``, the gated delta rule (:func:`mmhybrid.ops.gated_delta_rule`), a per-head
RMSNorm gated by ``SiLU(W_g x)`` and an output projection; no position encoding.
For images (not causal) the rule runs over the row-major token sequence and over
its reverse, and the two read-outs are summed (docs/design.md).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from mmhybrid.ops import delta_rule_macs, gated_delta_rule
from mmhybrid.ops.heads import acc_dtype
from mmhybrid.ops.streaming import conv_in_bands
from mmhybrid.registry import MIXERS
from ..block import MixerState
from ..inherit import Inherited, identity_dwconv, take


@MIXERS.register_module(name='gated_deltanet')
class BidirectionalGatedDeltaNet(nn.Module):
    """Gated DeltaNet token mixer with a forward and a backward scan.

    Args:
        dims (int): input/output channels; q and k have ``dims`` channels.
        num_heads (int): heads; each keeps a (dims / heads) x head_v_dim state.
        expand_v (float): value (and output gate) channels = ``dims * expand_v``.
        conv_size (int): k x k depth-wise conv on the q, k, v maps (0: none).

    ``state.hidden`` (B, N, dims * expand_v) becomes the summed read-out of the
    two scans before the norm and the output gate, the per-token hidden state a
    Hidden State Bridge samples.
    """
    letter = 'G'
    # decay rates and the per-head output norm (not a norm type mmengine finds)
    no_weight_decay = ('A_log', 'dt_bias', 'o_norm')

    def __init__(self, dims, num_heads, expand_v=1., conv_size=3):
        super().__init__()
        value_dims = int(dims * expand_v)
        if dims % num_heads or value_dims % num_heads:
            raise ValueError(f'dims {dims} and value dims {value_dims} must be '
                             f'divisible by num_heads {num_heads}')
        if conv_size < 0 or (conv_size and conv_size % 2 == 0):
            raise ValueError(f'conv_size must be odd (or 0 for no conv), got '
                             f'{conv_size}')
        self.num_heads = num_heads
        self.hidden_dims = value_dims  # what a Hidden State Bridge samples
        self.split = (dims, dims, value_dims)
        self.qkv = nn.Linear(dims, 2 * dims + value_dims, bias=False)
        self.conv = (nn.Conv2d(sum(self.split), sum(self.split), conv_size,
                               padding=conv_size // 2, groups=sum(self.split),
                               bias=False) if conv_size else None)
        self.a_proj = nn.Linear(dims, num_heads, bias=False)
        self.b_proj = nn.Linear(dims, num_heads, bias=False)
        self.g_proj = nn.Linear(dims, value_dims, bias=False)
        self.o_norm = nn.RMSNorm(value_dims // num_heads, eps=1e-5)
        self.o_proj = nn.Linear(value_dims, dims, bias=False)
        # Mamba-2 / Gated DeltaNet: A ~ U(0, 16), dt ~ logU(1e-3, 0.1) at init
        self.A_log = nn.Parameter(torch.empty(num_heads).uniform_(0, 16).log())
        dt = torch.exp(torch.rand(num_heads) * (math.log(0.1) - math.log(1e-3)) +
                       math.log(1e-3)).clamp(min=1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1

    def inherit_softmax(self, attn):
        """Start from a softmax attention: the fused ``qkv <- q | k | v`` (needs
        ``expand_v=1``), ``o_proj <- proj``, the short conv as the identity (centre
        tap 1); the gates, decay and output norm at their usual init; the
        teacher's biases have no place (Gated DeltaNet has none)."""
        result = Inherited({}, 'qkv<-q|k|v, o_proj<-proj')
        result.tensors['qkv.weight'] = take(self.qkv.weight, attn.qkv.weight,
                                            'qkv (q | k | v; expand_v=1)')
        result.tensors['o_proj.weight'] = take(self.o_proj.weight, attn.proj.weight,
                                               'o_proj')
        if self.conv is not None:
            result.tensors['conv.weight'] = identity_dwconv(self.conv)['weight']
            result.new['conv'] = 'identity (centre tap 1)'
        result.new['a_proj, b_proj, g_proj, o_norm, A_log, dt_bias'] = 'init'
        if attn.q.bias is not None:
            result.dropped['q.bias, k.bias, v.bias, proj.bias'] = 'Gated DeltaNet has none'
        return result

    def scan(self, x, hw_shape):
        """The summed read-out of both scans, (B, N, heads, head_v_dim). Its
        projections are this method's locals: they are freed when it returns,
        before the output gate and norm make their own full-size temporaries."""
        B, N, _ = x.shape
        qkv = (F.silu(self.qkv(x)) if self.conv is None else
               conv_in_bands(x, hw_shape, self.qkv, self.conv, F.silu))
        beta = torch.sigmoid(self.b_proj(x))
        acc = acc_dtype(x)
        g = -self.A_log.to(acc).exp() * F.softplus(self.a_proj(x).to(acc) + self.dt_bias)
        # reshape with sizes, not unflatten: the TorchScript ONNX exporter freezes
        # the sizes of unflatten's output
        q, k, v = (t.reshape(B, N, self.num_heads, -1)
                   for t in qkv.split(self.split, dim=-1))
        # forward scan on the row-major sequence plus backward scan on its reverse
        return gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True,
                                bidirectional=True)[0]

    def macs(self, x, hw_shape, state=MixerState()):
        """Both scans (2B sequences of N tokens, :func:`~mmhybrid.ops.
        delta_rule_macs`); projections and the depth-wise conv are child modules;
        the gate and the per-head RMSNorm are element-wise (fvcore and mmengine
        have no rule for RMSNorm either)."""
        B, N, C = x.shape
        H = self.num_heads
        return {'delta_rule': delta_rule_macs(2 * B, N, H, C // H, self.hidden_dims // H)}

    def forward(self, x, hw_shape, state=MixerState()):
        B, N, _ = x.shape
        hidden = self.scan(x, hw_shape)
        gate = F.silu(self.g_proj(x)).reshape(B, N, self.num_heads, -1)
        # the per-head RMSNorm in float32 at least, whatever the autocast /
        # parameter dtype, written out (ONNX has no RMSNormalization before opset 23)
        acc = acc_dtype(hidden)
        wide, norm = hidden.to(acc), self.o_norm
        out = wide * torch.rsqrt(wide.square().mean(-1, keepdim=True) +
                                 norm.eps) * norm.weight.to(acc)
        out = out.to(gate.dtype) * gate
        return self.o_proj(out.flatten(2)), state._replace(hidden=hidden.flatten(2))
