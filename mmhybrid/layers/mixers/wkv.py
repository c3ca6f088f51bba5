"""The WKV linear-attention layer of SoLA-Vision (Sec. 4.4, Fig. 4c, Eq. 9): its
token mixer (:class:`SpatialMix`) and its MLP (:class:`ChannelMix`)."""
import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer

from mmhybrid.ops import bi_wkv, quad_token_shift, wkv_macs
from mmhybrid.ops.streaming import in_token_slices
from mmhybrid.registry import MIXERS
from ..block import MixerState
from ..inherit import Inherited, take

# ChannelMix runs on slices of this many tokens (see in_token_slices)
SLICE_TOKENS = 2048


class TokenShiftMix(nn.Module):
    """``x * mu + shift(x) * (1 - mu)`` with one learnable ``mu`` per output."""

    def __init__(self, dims, num_outputs):
        super().__init__()
        self.mix = nn.Parameter(torch.full((num_outputs, dims), 0.5))

    def forward(self, x, hw_shape):
        shifted = quad_token_shift(x, hw_shape)
        return [torch.lerp(shifted, x, mu.to(x.dtype)) for mu in self.mix]


class Projection(nn.Linear):
    """Bias-free ``nn.Linear`` that can write its output channel-major: ``W x^T``
    viewed as (B, N, C), the layout :func:`bi_wkv`'s torch path computes in (a GEMM
    with a transposed operand costs the same as the plain one)."""

    def forward(self, x, channel_major=False):
        if not channel_major:
            return super().forward(x)
        B, N, C = x.shape
        y = torch.mm(self.weight, x.reshape(B * N, C).t())
        return y.view(-1, B, N).permute(1, 2, 0)


@MIXERS.register_module(name='wkv')
class SpatialMix(nn.Module):
    """Receptance-gated bidirectional WKV (Eq. 9): ``W_o (sigma(R) * wkv(K, V))``.

    Eq. 9 weighs token i by ``e^{-(|t-i|-1)/N w + k_i}`` and the token itself by
    ``e^{u + k_t}``: the learnable ``spatial_decay`` (w) is divided by the number of
    tokens N (the distance is measured in sequence lengths), the ``spatial_first``
    bonus (u) is not (Vision-RWKV's code divides both). ``key_norm`` adds
    Vision-RWKV's optional LayerNorm on the WKV output (not in the paper). The WKV
    output (the per-token normalised hidden state) goes to ``state.hidden`` for
    the Hidden State Bridge. One head: ``num_heads`` is taken and unused (the
    decay is per channel).
    """
    letter = 'L'
    # per-channel rates: weight decay would pull them to zero (no decay)
    no_weight_decay = ('spatial_decay', 'spatial_first')

    def __init__(self, dims, num_heads=1, key_norm=False, norm_cfg=dict(type='LN')):
        super().__init__()
        self.shift_mix = TokenShiftMix(dims, 3)
        self.key = Projection(dims, dims, bias=False)
        self.value = Projection(dims, dims, bias=False)
        self.receptance = Projection(dims, dims, bias=False)
        self.spatial_decay = nn.Parameter(torch.zeros(dims))
        self.spatial_first = nn.Parameter(torch.zeros(dims))
        self.key_norm = (build_norm_layer(norm_cfg, dims)[1]
                         if key_norm else nn.Identity())
        self.output = nn.Linear(dims, dims, bias=False)
        self.hidden_dims = dims

    def init_decay(self, depth_ratio):
        """Spread decays over channels, slower decay deeper (RWKV's init idea).

        ``spatial_decay`` goes from -5 to 3 across channels along a power curve whose
        exponent grows with depth; ``spatial_first`` starts at log(0.3): a token
        weighs itself 0.3 times its nearest neighbours (RWKV-4's initial bonus).
        """
        C = self.spatial_decay.numel()
        frac = torch.arange(C, dtype=torch.float32) / max(C - 1, 1)
        with torch.no_grad():
            self.spatial_decay.copy_(-5 + 8 * frac**(0.7 + 1.3 * depth_ratio))
            self.spatial_first.fill_(float(torch.log(torch.tensor(0.3))))

    def macs(self, x, hw_shape, state=MixerState()):
        """The WKV scan (:func:`~mmhybrid.ops.wkv_macs`); the projections and
        norms are child modules, counted as they run."""
        B, N, C = x.shape
        return {'wkv': wkv_macs(B, N, C)}

    def inherit_softmax(self, attn):
        """Start from a softmax attention: ``receptance <- q``, ``key <- k``,
        ``value <- v``, ``output <- proj`` (the teacher's biases have no place:
        WKV has none), ``shift_mix.mix = 1`` (no token shift at the start), the
        decays from :meth:`init_decay`."""
        result = Inherited({}, 'receptance<-q, key<-k, value<-v, output<-proj')
        for ours, theirs in (('receptance', attn.q), ('key', attn.k),
                             ('value', attn.v), ('output', attn.proj)):
            result.tensors[f'{ours}.weight'] = take(getattr(self, ours).weight,
                                                    theirs.weight, ours)
        result.tensors['shift_mix.mix'] = torch.ones_like(self.shift_mix.mix)
        result.new['shift_mix.mix'] = '1 (no token shift)'
        result.new['spatial_decay, spatial_first'] = 'init_decay'
        if not isinstance(self.key_norm, nn.Identity):
            result.new['key_norm'] = 'init'
        if attn.q.bias is not None:
            result.dropped['q.bias, k.bias, v.bias, proj.bias'] = 'WKV has none'
        return result

    def forward(self, x, hw_shape, state=MixerState()):
        xk, xv, xr = self.shift_mix(x, hw_shape)
        # off CUDA bi_wkv runs its torch path, channel-major: k, v, r, the WKV
        # output and the gate stay in that layout and the output projection reads
        # it, so nothing is transposed (CUDA's Triton kernels take channels last)
        cm = not x.is_cuda
        hidden = bi_wkv(self.spatial_decay / x.shape[1], self.spatial_first,
                        self.key(xk, cm), self.value(xv, cm))
        out = self.receptance(xr, cm).sigmoid_() * self.key_norm(hidden)
        return self.output(out), state._replace(hidden=hidden)


class ChannelMix(nn.Module):
    """Gated squared-ReLU MLP: ``sigma(R_c) * W_v ReLU(K_c)^2`` (``key_norm``: a
    LayerNorm on ``ReLU(K_c)^2``, Vision-RWKV's option, not in the paper)."""

    def __init__(self, dims, hidden_rate=4, key_norm=False,
                 norm_cfg=dict(type='LN')):
        super().__init__()
        hidden = int(dims * hidden_rate)
        self.shift_mix = TokenShiftMix(dims, 2)
        self.key = nn.Linear(dims, hidden, bias=False)
        self.key_norm = (build_norm_layer(norm_cfg, hidden)[1]
                         if key_norm else nn.Identity())
        self.receptance = nn.Linear(dims, dims, bias=False)
        self.value = nn.Linear(hidden, dims, bias=False)

    def inherit_mlp(self, mlp):
        """Start from a Transformer MLP (:class:`MlpWeights`): ``key <- fc1``,
        ``receptance`` zero (its sigmoid gate is 0.5 everywhere), ``value <- 2
        fc2`` (compensating that gate), ``shift_mix.mix = 1`` (no token shift);
        the biases have no place and GELU becomes ReLU^2 (not the teacher's
        function)."""
        result = Inherited({}, 'key<-fc1, value<-2*fc2',
                           note='GELU -> ReLU^2')
        result.tensors['key.weight'] = take(self.key.weight, mlp.fc1.weight, 'key')
        result.tensors['value.weight'] = take(self.value.weight, 2 * mlp.fc2.weight,
                                              'value')
        result.tensors['receptance.weight'] = torch.zeros_like(self.receptance.weight)
        result.new['receptance'] = 'zero (gate 0.5)'
        result.tensors['shift_mix.mix'] = torch.ones_like(self.shift_mix.mix)
        result.new['shift_mix.mix'] = '1 (no token shift)'
        if not isinstance(self.key_norm, nn.Identity):
            result.new['key_norm'] = 'init'
        if mlp.fc1.bias is not None:
            result.dropped['fc1.bias, fc2.bias'] = 'ChannelMix has none'
        return result

    def forward(self, x, hw_shape):
        shifted = quad_token_shift(x, hw_shape)
        mu_k, mu_r = self.shift_mix.mix.to(x.dtype)

        def mix(xi, si):
            # ReLU in place: the projection's output is not kept by its backward
            k = torch.relu_(self.key(torch.lerp(si, xi, mu_k)))
            r = torch.sigmoid(self.receptance(torch.lerp(si, xi, mu_r)))
            return r * self.value(self.key_norm(k * k))

        return in_token_slices(mix, x, shifted, tokens=SLICE_TOKENS)
