"""The MLPs' slicing: conv_in_bands (rows in bands with a recomputed halo) and
in_token_slices (Mlp) equal the whole map."""
import pytest
import torch
import torch.nn as nn

from mmhybrid.layers.mlp import Mlp
from mmhybrid.ops.streaming import conv_in_bands


@pytest.mark.parametrize('hw, kernel, band', [((37, 23), 3, 50), ((5, 300), 3, 100),
                                              ((9, 9), 3, 1), ((11, 6), 5, 13),
                                              ((3, 2), 5, 4)])
def test_bands_equal_the_whole_map(hw, kernel, band):
    torch.manual_seed(0)
    before = nn.Linear(8, 12).double()
    conv = nn.Conv2d(12, 12, kernel, padding=kernel // 2, groups=12).double()
    x = torch.randn(2, hw[0] * hw[1], 8, dtype=torch.float64, requires_grad=True)
    outs = [conv_in_bands(x, hw, before, conv, nn.GELU(), band_tokens=tokens)
            for tokens in (band, hw[0] * hw[1])]
    grads = [torch.autograd.grad(o.sin().sum(), x)[0] for o in outs]
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-12, atol=1e-12)


def test_mlp_slices_match_formula():
    """fc2(GELU(fc1 x)) when the tokens run in slices that do not divide B * N,
    forward and gradients."""
    torch.manual_seed(0)
    m = Mlp(8, 1.5).double()
    m.slice_tokens = 7
    x = torch.randn(2, 5 * 6, 8, dtype=torch.float64, requires_grad=True)
    ref = nn.functional.gelu(x @ m.fc1.weight.T + m.fc1.bias) @ m.fc2.weight.T + m.fc2.bias
    grad = torch.randn_like(ref)
    want = torch.autograd.grad(ref, [x, m.fc1.weight], grad)
    calls = []
    m.fc1.register_forward_hook(lambda mod, i, o: calls.append(o.shape[0]))
    out = m(x, (5, 6))
    assert calls == [7] * 8 + [4]  # 60 tokens in slices of 7
    got = torch.autograd.grad(out, [x, m.fc1.weight], grad)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10)
