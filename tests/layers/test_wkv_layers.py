"""SoLA's WKV layer MLP (ChannelMix) against its formula, across token slices."""
import torch

from mmhybrid.layers.mixers import ChannelMix
from mmhybrid.layers.mixers import wkv
from mmhybrid.ops import quad_token_shift


def test_channel_mix_slices_match_formula(monkeypatch):
    """sigma(R xr) * W_v ReLU(K xk)^2 with xk, xr the token-shift mixes, when the
    tokens run in slices that do not divide B * N, forward and gradients."""
    monkeypatch.setattr(wkv, 'SLICE_TOKENS', 7)
    torch.manual_seed(0)
    m = ChannelMix(8).double()
    with torch.no_grad():
        m.shift_mix.mix.uniform_()
    x = torch.randn(2, 5 * 6, 8, dtype=torch.float64, requires_grad=True)
    s = quad_token_shift(x, (5, 6))
    xk, xr = (s + mu * (x - s) for mu in m.shift_mix.mix)
    ref = torch.sigmoid(xr @ m.receptance.weight.T) * (
        torch.relu(xk @ m.key.weight.T)**2 @ m.value.weight.T)
    grad = torch.randn_like(ref)
    want = torch.autograd.grad(ref, [x, m.key.weight, m.shift_mix.mix], grad)
    out = m(x, (5, 6))
    got = torch.autograd.grad(out, [x, m.key.weight, m.shift_mix.mix], grad)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10)
