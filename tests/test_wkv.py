"""Bidirectional WKV (SoLA Eq. 9): the O(TC) chunked path against the O(T^2) reference."""
import pytest
import torch

from mmhybrid.ops import bi_wkv
from mmhybrid.ops.wkv import chunk_bi_wkv, naive_bi_wkv


def make_inputs(T, C=6, B=2, w_scale=1.0, k_scale=1.0, dtype=torch.float64):
    w = torch.randn(C, dtype=dtype) * w_scale
    u = torch.randn(C, dtype=dtype)
    k = torch.randn(B, T, C, dtype=dtype) * k_scale
    v = torch.randn(B, T, C, dtype=dtype)
    return w, u, k, v


# (T, w_scale, k_scale): single chunk (|w| T small, the layer's regime), many
# chunks (|w| T large, both signs of w), and extreme keys.
CASES = [(1, 1.0, 1.0), (7, 1.0, 1.0), (197, 0.01, 1.0), (197, 0.5, 1.0),
         (197, -0.3, 1.0), (300, 0.02, 60.0), (64, 3.0, 60.0),
         (513, -1.0, 20.0), (3137, 3.0 / 3137, 5.0)]


@pytest.mark.parametrize('T,w_scale,k_scale', CASES)
def test_forward_matches_naive_float64(T, w_scale, k_scale):
    C = 3 if T > 1000 else 6
    w, u, k, v = make_inputs(T, C, w_scale=w_scale, k_scale=k_scale)
    out = chunk_bi_wkv(w, u, k, v)
    ref = naive_bi_wkv(w, u, k, v)
    assert out.shape == (2, T, C)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize('T,w_scale,k_scale', [(7, 1.0, 1.0), (197, 0.5, 1.0),
                                               (300, 0.02, 60.0),
                                               (100, -2.0, 10.0)])
def test_gradients_match_naive(T, w_scale, k_scale):
    inputs = make_inputs(T, 4, w_scale=w_scale, k_scale=k_scale)
    grad_out = torch.randn(2, T, 4, dtype=torch.float64)
    grads = []
    for fn in (chunk_bi_wkv, naive_bi_wkv):
        leaves = [x.clone().requires_grad_() for x in inputs]
        (fn(*leaves) * grad_out).sum().backward()
        grads.append([x.grad for x in leaves])
    for name, g, ref in zip('wukv', *grads):
        assert torch.isfinite(g).all(), name
        torch.testing.assert_close(g, ref, rtol=1e-8, atol=1e-9, msg=name)


def test_float32_long_sequence():
    T, C = 2049, 4
    w, u, k, v = make_inputs(T, C, B=1, w_scale=3.0 / T, k_scale=5.0,
                             dtype=torch.float32)
    ref = naive_bi_wkv(*(x.double() for x in (w, u, k, v)))
    out = bi_wkv(w, u, k, v)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), ref, rtol=1e-4, atol=1e-5)


def test_bfloat16_inputs_accumulate_in_float32():
    T, C = 197, 16
    w, u, k, v = make_inputs(T, C, w_scale=1.0 / T, dtype=torch.float32)
    k, v = k.bfloat16(), v.bfloat16()
    out = bi_wkv(w, u, k, v)
    assert out.dtype == torch.bfloat16
    ref = naive_bi_wkv(w.double(), u.double(), k.double(), v.double())
    # bf16 keeps 8 bits of mantissa: compare at bf16 resolution
    torch.testing.assert_close(out.double(), ref, rtol=2e-2, atol=2e-2)
    leaves = [x.clone().requires_grad_() for x in (w, u, k, v)]
    bi_wkv(*leaves).float().sum().backward()
    assert all(torch.isfinite(x.grad.float()).all() for x in leaves)


def test_extreme_keys_stay_finite_float32():
    T, C = 1000, 8
    w, u, k, v = make_inputs(T, C, w_scale=0.5, dtype=torch.float32)
    k = torch.where(torch.rand_like(k) > 0.5, 60.0, -60.0)
    leaves = [x.clone().requires_grad_() for x in (w, u, k, v)]
    out = bi_wkv(*leaves)
    out.sum().backward()
    assert torch.isfinite(out).all()
    assert all(torch.isfinite(x.grad).all() for x in leaves)
    ref = naive_bi_wkv(*(x.double() for x in (w, u, k, v)))
    torch.testing.assert_close(out.double(), ref, rtol=1e-4, atol=1e-4)


def test_bad_shapes_raise():
    w, u, k, v = make_inputs(5, 4)
    with pytest.raises(ValueError, match='w and u'):
        bi_wkv(w[:3], u, k, v)
    with pytest.raises(ValueError, match='k and v'):
        bi_wkv(w, u, k, v[:, :3])
    with pytest.raises(KeyError, match='backend'):
        bi_wkv(w, u, k, v, backend='nope')
