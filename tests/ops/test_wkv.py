"""Bidirectional WKV (SoLA Eq. 9): the O(TC) chunked path against the O(T^2) reference,
the backend dispatch, and (in a subprocess) the Triton kernels under the interpreter."""
import importlib.util
import os
import subprocess
import sys

import pytest
import torch

from mmhybrid.ops import bi_wkv
from mmhybrid.ops import use_backend
from mmhybrid.ops.wkv import BACKENDS, chunk_bi_wkv, naive_bi_wkv
from mmhybrid.ops.wkv import chunk
from mmhybrid.ops.wkv.chunk import _wide_range_bi_wkv


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
         (513, -1.0, 20.0), (1500, 3.0 / 1500, 5.0)]


@pytest.mark.parametrize('T,w_scale,k_scale', CASES)
def test_forward_matches_naive_float64(T, w_scale, k_scale):
    C = 2 if T > 1000 else 6
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


def assert_same_values_and_grads(fn, ref_fn, inputs):
    """``fn`` and ``ref_fn`` give the same output and gradients (w, u, k, v) in float64."""
    grad_out = torch.randn_like(inputs[2])
    results = []
    for f in (fn, ref_fn):
        leaves = [x.detach().clone().requires_grad_() for x in inputs]
        out = f(*leaves)
        (out * grad_out).sum().backward()
        results.append([out] + [x.grad for x in leaves])
    for name, g, ref in zip('ywukv', *results):
        torch.testing.assert_close(g, ref, rtol=1e-9, atol=1e-10, msg=name)


@pytest.mark.parametrize('T,segment,channel_major', [(197, 40, False), (100, 17, True),
                                                     (64, 32, True)])
def test_streamed_segments_match_naive(monkeypatch, T, segment, channel_major):
    """The sequence streamed in segments (the last one padded), channels-last and
    channel-major inputs: forward and gradients."""
    monkeypatch.setattr(chunk, 'SEGMENT', segment)
    monkeypatch.setattr(chunk, 'WHOLE', 0)
    inputs = make_inputs(T, 5, w_scale=3.0 / T, k_scale=3.0)
    if channel_major:
        inputs = inputs[:2] + tuple(x.transpose(1, 2).contiguous().transpose(1, 2)
                                    for x in inputs[2:])
    assert_same_values_and_grads(chunk_bi_wkv, naive_bi_wkv, inputs)


@pytest.mark.parametrize('T,w_scale', [(7, 1.0), (300, 0.05), (100, 3.0)])
def test_fast_and_wide_range_paths_agree(T, w_scale):
    """The single-scale fp32/fp64 path with its analytic backward and the wide-range
    float64 path (autograd) give the same values and gradients where both apply."""
    inputs = make_inputs(T, 4, w_scale=w_scale / T, k_scale=5.0)
    assert_same_values_and_grads(chunk_bi_wkv, _wide_range_bi_wkv, inputs)


@pytest.mark.parametrize('w,u', [(100.0, 0.0), (89.5, 0.0), (-100.0, 0.0),
                                 (0.01, 100.0), (0.01, -1000.0), (1e6, 1e6)])
def test_extreme_decay_and_bonus_float32(w, u):
    """w >= 89 and u >= 89 overflowed e^{w}, e^{u} before (NaN); w = -100 over 64 tokens
    drifted by ~1% through the fp32 carried log-scale. Exact now, gradients finite."""
    T, C = 64, 3
    _, _, k, v = make_inputs(T, C, B=1, k_scale=20.0, dtype=torch.float32)
    w = torch.tensor([w, w / 2, -w / 3])
    u = torch.tensor([u, u / 2, 0.0])
    leaves = [x.clone().requires_grad_() for x in (w, u, k, v)]
    out = bi_wkv(*leaves)
    out.sum().backward()
    ref = naive_bi_wkv(*(x.double() for x in (w, u, k, v)))
    assert torch.isfinite(out).all()
    assert all(torch.isfinite(x.grad).all() for x in leaves)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)


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


def test_backward_keeps_few_tensors():
    """The analytic backward keeps k, v, the denominator and the output (which
    its consumer keeps anyway), not autograd's dozen intermediates."""
    B, T, C = 1, 4096, 32
    w, u, k, v = make_inputs(T, C, B=B, w_scale=3.0 / T, dtype=torch.float32)
    k.requires_grad_()
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = chunk_bi_wkv(w, u, k, v)
    unit = B * T * C * 4
    saved = sum(storages.values()) - storages.get(out.untyped_storage().data_ptr(), 0)
    assert saved <= 4 * unit, f'{saved / unit:.2f} x the (B, T, C) tensor saved'


def test_backends_env_var_and_context(monkeypatch):
    w, u, k, v = make_inputs(40, 5, w_scale=0.01)
    assert {'chunk', 'torch', 'naive', 'triton'} == set(BACKENDS)
    ref = naive_bi_wkv(w, u, k, v)
    torch.testing.assert_close(bi_wkv(w, u, k, v, backend='torch'), ref)
    monkeypatch.setenv('MMHYBRID_BACKEND', 'bi_wkv=naive')
    assert torch.equal(bi_wkv(w, u, k, v), ref)
    with use_backend(bi_wkv='torch'):  # the context manager wins over the variable
        assert not torch.equal(bi_wkv(w, u, k, v), ref)
    monkeypatch.setenv('MMHYBRID_BACKEND', 'bi_wkv=nope')
    with pytest.raises(KeyError, match='nope'):
        bi_wkv(w, u, k, v)
    monkeypatch.delenv('MMHYBRID_BACKEND')
    if importlib.util.find_spec('triton') and not _triton_interpreted():
        with pytest.raises(RuntimeError, match='CUDA'):
            bi_wkv(w, u, k, v, backend='triton')


def _triton_interpreted():
    from mmhybrid.ops.wkv import fused
    return fused.INTERPRETED


@pytest.mark.skipif(importlib.util.find_spec('triton') is None,
                    reason='needs triton')
def test_triton_kernels_interpreted():
    """tests/ops/test_wkv_triton.py on CPU tensors under TRITON_INTERPRET=1, in one
    subprocess (the variable is read when the kernels are decorated)."""
    test_file = os.path.join(os.path.dirname(__file__), 'test_wkv_triton.py')
    env = dict(os.environ, TRITON_INTERPRET='1')
    result = subprocess.run(
        [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', test_file],
        env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert ' passed' in result.stdout, result.stdout[-2000:]


def test_bad_shapes_raise():
    w, u, k, v = make_inputs(5, 4)
    with pytest.raises(ValueError, match='w and u'):
        bi_wkv(w[:3], u, k, v)
    with pytest.raises(ValueError, match='k and v'):
        bi_wkv(w, u, k, v[:, :3])
    with pytest.raises(KeyError, match='backend'):
        bi_wkv(w, u, k, v, backend='nope')


def reference_token_shift(x, hw_shape, shift):
    """Q-Shift by padding the (B, C, H, W) map, one group per direction."""
    B, N, C = x.shape
    H, W = hw_shape
    x = x.transpose(1, 2).reshape(B, C, H, W)
    g, s = C // 4, shift
    pad = torch.nn.functional.pad
    groups = (pad(x[:, :g], (s, 0, 0, 0))[..., :, :W],
              pad(x[:, g:2 * g], (0, s, 0, 0))[..., :, s:s + W],
              pad(x[:, 2 * g:3 * g], (0, 0, s, 0))[..., :H, :],
              pad(x[:, 3 * g:], (0, 0, 0, s))[..., s:s + H, :])
    return torch.cat(groups, dim=1).flatten(2).transpose(1, 2)


@pytest.mark.parametrize('hw,C,shift', [((5, 7), 10, 1), ((4, 4), 8, 2),
                                        ((3, 6), 3, 1), ((2, 3), 9, 4)])
def test_quad_token_shift_matches_padding_reference(hw, C, shift):
    from mmhybrid.ops import quad_token_shift
    x = torch.randn(2, hw[0] * hw[1], C, dtype=torch.float64, requires_grad=True)
    out = quad_token_shift(x, hw, shift)
    assert out.is_contiguous()
    torch.testing.assert_close(out, reference_token_shift(x, hw, shift), rtol=0, atol=0)
    assert torch.autograd.gradcheck(lambda t: quad_token_shift(t, hw, shift), (x, ))
    from mmhybrid.ops.token_shift import shift_by_padding  # the traced form
    traced = shift_by_padding(x.reshape(2, *hw, C), shift).reshape(x.shape)
    torch.testing.assert_close(traced, out, rtol=0, atol=0)
