"""Triton WKV kernels (``ops/wkv/fused.py``) against the float64 O(T^2) reference.

Natively on CUDA (marked ``cuda``), or on CPU tensors under ``TRITON_INTERPRET=1``:
``tests/ops/test_wkv.py::test_triton_kernels_interpreted`` runs this file in one subprocess
with that variable set, because ``@triton.jit`` reads it when it decorates, i.e. when
``mmhybrid.ops.wkv.fused`` is first imported, and cannot be switched afterwards.
"""
import pytest
import torch

pytest.importorskip('triton')

from mmhybrid.ops import bi_wkv  # noqa: E402
from mmhybrid.ops.wkv import fused, naive_bi_wkv  # noqa: E402

INTERPRET = fused.INTERPRETED
DEVICE = 'cpu' if INTERPRET else 'cuda'
pytestmark = [] if INTERPRET else [pytest.mark.cuda]

# (T, C, decay span T max|w|, k_scale): one token, a partial tile, several tiles with
# awkward C, many tiles and carry blocks with |k| up to 60; spans up to the kernels'
# single-scale bound (MAX_DECAY_SPAN = 30)
SHAPES = [(1, 5, 1.0, 1.0), (7, 24, 10.0, 1.0), (197, 24, 29.0, 3.0),
          (1000, 5, 29.0, 60.0)]
# fp32 to fp32 accuracy; fp16/bf16 inputs and outputs, fp32 inside (the backward reads
# the output y in its own dtype, as flash-attention does)
TOLERANCE = {torch.float32: 2e-5, torch.float16: 3e-3, torch.bfloat16: 5e-2}


@pytest.fixture(autouse=True)
def _small_carry_blocks(monkeypatch):
    # several blocks of tile sums in the carry scan even at T = 1000
    monkeypatch.setattr(fused, 'BLOCK_N', 4)
    torch.manual_seed(0)  # inputs independent of which tests ran before


def make_inputs(T, C, span, k_scale, dtype, B=1):
    w = (torch.rand(C) * 2 - 1) * span / T  # both signs, T max|w| <= span
    u = torch.randn(C)
    k = (torch.randn(B, T, C) * k_scale).to(dtype)
    v = torch.randn(B, T, C).to(dtype)
    return w, u, k, v


def check_against_reference(w, u, k, v, tol, fn=fused.fused_bi_wkv):
    grad = torch.randn(k.shape).to(k.dtype)
    leaves = [x.detach().to(DEVICE, copy=True).requires_grad_() for x in (w, u, k, v)]
    out = fn(*leaves)
    out.backward(grad.to(DEVICE))
    assert out.dtype == v.dtype and out.device.type == DEVICE
    ref_leaves = [x.detach().double().requires_grad_() for x in (w, u, k, v)]
    ref = naive_bi_wkv(*ref_leaves)
    ref.backward(grad.double())
    for name, got, want in zip(('y', 'w', 'u', 'k', 'v'),
                               [out] + [x.grad for x in leaves],
                               [ref] + [x.grad for x in ref_leaves]):
        got = got.detach().double().cpu()
        want = torch.zeros_like(got) if want is None else want  # w unused at T = 1
        assert torch.isfinite(got).all(), name
        scale = want.abs().max().item() + 1e-2  # k, v, w grads are 0 at T = 1
        err = (got - want).abs().max().item() / scale
        assert err < tol, f'{name}: max error {err:.2e} of max |ref| {scale:.2e}'


@pytest.mark.parametrize('T,C,span,k_scale', SHAPES)
def test_fp32_forward_and_gradients(T, C, span, k_scale):
    check_against_reference(*make_inputs(T, C, span, k_scale, torch.float32),
                            TOLERANCE[torch.float32])


@pytest.mark.parametrize('dtype,C', [(torch.float16, 5), (torch.bfloat16, 24)])
def test_half_inputs_accumulate_in_fp32(dtype, C):
    check_against_reference(*make_inputs(197, C, 20.0, 3.0, dtype), TOLERANCE[dtype])


def test_outside_single_scale_is_nan_per_channel():
    """Channels whose w or u leave the kernels' range come out NaN (checked on the
    device, no host sync); the others stay exact."""
    T = 40
    w, u, k, v = make_inputs(T, 5, 1.0, 3.0, torch.float32)
    w = torch.tensor([100.0, -100.0, 0.5, -0.5, 0.2]) / T * 2  # 5, -5 exceed 30 / T
    u = torch.tensor([0.1, 0.1, 0.1, 50.0, -0.3])  # u = 50 exceeds BONUS_RANGE
    out = fused.fused_bi_wkv(*(x.to(DEVICE) for x in (w, u, k, v))).cpu()
    bad = torch.tensor([True, True, False, True, False])
    assert out[..., bad].isnan().all() and not out[..., ~bad].isnan().any()
    want = naive_bi_wkv(*(x.double() for x in (w, u, k, v)))
    torch.testing.assert_close(out[..., ~bad].double(), want[..., ~bad], rtol=1e-4,
                               atol=1e-4)


def test_dispatch_picks_triton(monkeypatch):
    w, u, k, v = (x.to(DEVICE) for x in make_inputs(33, 5, 3.0, 1.0, torch.float32))
    monkeypatch.setenv('MMHYBRID_BACKEND', 'triton')
    forced = bi_wkv(w, u, k, v)
    monkeypatch.setenv('MMHYBRID_BACKEND', 'bi_wkv=torch')
    torch.testing.assert_close(forced, bi_wkv(w, u, k, v), rtol=1e-5, atol=1e-5)
    if DEVICE == 'cuda':
        monkeypatch.delenv('MMHYBRID_BACKEND')
        torch.testing.assert_close(bi_wkv(w, u, k, v), forced, rtol=0, atol=0)


@pytest.mark.skipif(INTERPRET, reason='too large for the interpreter')
def test_long_sequence_matches_chunk_path():
    """SoLA-T stage 1 at 1024^2 (65536 tokens, 96 channels), layer-scaled w and u."""
    T, C = 65536, 96
    w = (torch.rand(C) * 8 - 5) / T
    u = torch.full((C, ), -1.2) / T
    k, v = torch.randn(2, T, C) * 3, torch.randn(2, T, C)
    grad = torch.randn(2, T, C)
    results = []
    for backend, device in (('triton', 'cuda'), ('chunk', 'cpu')):
        leaves = [x.to(device).requires_grad_() for x in (w, u, k, v)]
        out = bi_wkv(*leaves, backend=backend)
        out.backward(grad.to(device))
        results.append([out] + [x.grad for x in leaves])
    for name, got, want in zip('ywukv', *results):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4, msg=name)


def test_custom_ops_pass_opcheck():
    """Schema, fake kernels and registered autograd of the custom ops agree with the
    kernels (torch.library.opcheck)."""
    w, u, k, v = make_inputs(70, 6, 10.0, 2.0, torch.float32)
    args = [x.to(DEVICE).requires_grad_() for x in (w, u, k, v)]
    torch.library.opcheck(fused.bi_wkv_forward, args,
                          test_utils=('test_schema', 'test_faketensor',
                                      'test_autograd_registration'))
