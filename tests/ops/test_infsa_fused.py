"""Linear InfSA backends: the lean torch path and the Triton kernels vs Eq. 16-21.

Kernel tests run natively on CUDA, or on CPU tensors in Triton's interpreter:
without a GPU, ``test_kernels_in_interpreter`` reruns this module with
``TRITON_INTERPRET=1`` (see tests/_triton.py).
"""
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests._triton import KERNEL_DEVICE, driver, needs_kernels, run_in_interpreter
from mmhybrid.ops.infsa import (linear_infsa, linear_infsa_backend,
                                linear_infsa_context, naive_linear_infsa)

ENV = 'MMHYBRID_BACKEND'
# (dtype, rtol/atol of the output, relative error bound of the gradients) vs float64
PRECISION = {torch.float64: (1e-10, 1e-9), torch.float32: (1e-4, 1e-4),
             torch.float16: (5e-3, 1e-2), torch.bfloat16: (3e-2, 5e-2)}


def head_views(B, H, N, d, dtype=torch.float64, device='cpu', shift=0.3):
    """q, k, v as (B, H, N, d) head views of (B, N, H*d) projections (not contiguous)."""
    def one(offset):
        x = torch.randn(B, N, H * d, dtype=torch.float64) + offset
        return x.to(device, dtype).view(B, N, H, d).transpose(1, 2)
    return one(shift), one(shift), one(0.)


def check(out_fn, B, H, N, d, tied, dtype, device, **kwargs):
    """Output and gradients of ``out_fn(q, k, v)`` vs the float64 naive formula."""
    q, k, v = head_views(B, H, N, d, dtype, device)
    if tied:
        k = q
    ref_inputs = [t.detach().cpu().double().requires_grad_() for t in (q, k, v)]
    if tied:
        ref_inputs[1] = ref_inputs[0]
    inputs = [t.detach().requires_grad_() for t in (q, k, v)]
    if tied:
        inputs[1] = inputs[0]
    out = out_fn(*inputs, **kwargs)
    ref = naive_linear_infsa(*ref_inputs)[..., :1, :]
    tol, grad_tol = PRECISION[dtype]
    assert out.dtype == dtype and out.shape == (B, H, 1, d)
    torch.testing.assert_close(out.cpu().double(), ref, rtol=tol, atol=tol)
    grad = torch.randn_like(ref)
    leaves = [0, 2] if tied else [0, 1, 2]
    got = torch.autograd.grad(out, [inputs[i] for i in leaves], grad.to(device, dtype))
    want = torch.autograd.grad(ref, [ref_inputs[i] for i in leaves], grad)
    for a, b in zip(got, want):
        assert a.dtype == dtype and a.shape == b.shape
        # relative error, floored for near-zero gradients (N = 1: dQ is O(eps))
        err = (a.cpu().double() - b).norm() / max(b.norm().item(), 1e-3)
        assert err < grad_tol, err


# ---- the torch backend (the default on CPU) ---------------------------------------


@pytest.mark.parametrize('dtype', [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize('tied', [True, False])
def test_torch_backend_matches_naive(dtype, tied):
    check(linear_infsa_context, 2, 3, 197, 12, tied, dtype, 'cpu', backend='torch')


@pytest.mark.parametrize('tied', [True, False])
def test_torch_backend_makes_no_token_sized_temporaries(tied):
    """Forward allocates nothing of N x d size; backward only the gradients."""
    B, H, N, d = 2, 3, 500, 8
    q, k, v = (t.float().requires_grad_() for t in head_views(B, H, N, d))
    if tied:
        k = q

    class Allocations(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.tensors = []  # kept alive, so no storage is reused

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out, ):
                if isinstance(t, torch.Tensor) and t.numel() >= N * d:
                    self.tensors.append(t)
            return out

        @property
        def storages(self):
            return {t.untyped_storage().data_ptr() for t in self.tensors}

    inputs = {t.untyped_storage().data_ptr() for t in (q, k, v)}
    with Allocations() as fwd:
        out = linear_infsa_context(q, k, v, backend='torch')
    assert fwd.storages - inputs == set()
    with Allocations() as bwd:  # autograd.grad: no AccumulateGrad copies
        torch.autograd.grad(out.sum(), (q, v) if tied else (q, k, v))
    assert len(bwd.storages - inputs) == (2 if tied else 3)


def test_backend_choice_and_env(monkeypatch):
    q, k, v = head_views(1, 2, 5, 4)
    monkeypatch.delenv(ENV, raising=False)
    assert linear_infsa_backend(q, k, v) == 'torch'
    monkeypatch.setenv(ENV, 'torch')
    assert linear_infsa_backend(q, k, v) == 'torch'
    monkeypatch.setenv(ENV, 'linear_infsa=bogus')
    with pytest.raises(ValueError, match="unknown linear_infsa backend 'bogus'"):
        linear_infsa(q, k, v)
    monkeypatch.setenv(ENV, 'triton')
    assert linear_infsa_backend(q, k, v, backend='torch') == 'torch'
    if KERNEL_DEVICE is None:  # plain CPU process: a clear error, not a crash
        pytest.importorskip('triton')
        with pytest.raises(RuntimeError, match='triton backend: .*need CUDA'):
            linear_infsa(q, k, v)


def test_works_without_triton(monkeypatch):
    """No Triton: the op imports and runs on the torch path; forcing triton says why."""
    monkeypatch.setitem(sys.modules, 'triton', None)  # import triton -> ImportError
    monkeypatch.delitem(sys.modules, 'mmhybrid.ops.infsa.fused', raising=False)
    monkeypatch.delenv(ENV, raising=False)
    q, k, v = head_views(1, 2, 5, 4)
    torch.testing.assert_close(linear_infsa(q, k, v), naive_linear_infsa(q, k, v))
    with pytest.raises(RuntimeError, match='triton does not import'):
        linear_infsa(q, k, v, backend='triton')


# ---- the Triton kernels -------------------------------------------------------------


@needs_kernels
@pytest.mark.parametrize('N', [1, 7, 197, 1000])
@pytest.mark.parametrize('tied', [True, False])
def test_kernels_exact_in_float64(N, tied):
    """float64 accumulation: the fused passes equal Eq. 16-21 to rounding."""
    check(linear_infsa_context, 1, 1, N, 12, tied, torch.float64, KERNEL_DEVICE,
          backend='triton')
    if N == 197:  # N split over 4 programs, ragged tiles, d = 5, B and H > 1
        from mmhybrid.ops.infsa.fused import triton_linear_infsa_context
        check(triton_linear_infsa_context, 2, 2, N, 5, tied, torch.float64,
              KERNEL_DEVICE, block_n=32, rows_per_program=64)


@needs_kernels
@pytest.mark.parametrize('dtype', [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize('tied', [True, False])
def test_kernels_low_precision(dtype, tied):
    check(linear_infsa_context, 1, 2, 197, 12, tied, dtype, KERNEL_DEVICE,
          backend='triton')


@needs_kernels
def test_kernels_match_torch_backend_and_all_negative_scores():
    q, k, v = head_views(1, 2, 33, 6, torch.float32, KERNEL_DEVICE)
    torch.testing.assert_close(linear_infsa(q, k, v, backend='triton'),
                               linear_infsa(q, k, v, backend='torch'))
    q = q.abs().requires_grad_()
    k = (-k.abs()).requires_grad_()  # every score is cut by the ReLU: h = 0
    out = linear_infsa_context(q, k, v, backend='triton')
    assert out.abs().max() == 0
    assert all(torch.isfinite(g).all()
               for g in torch.autograd.grad(out.sum(), (q, k)))


@needs_kernels
@pytest.mark.parametrize('tied', [False, True])
def test_custom_ops_pass_opcheck(tied):
    """Schema, fake kernels and registered autograd of the custom ops agree with the
    kernels (torch.library.opcheck), tied and untied."""
    from mmhybrid.ops.infsa import fused
    q, k, v = (torch.randn(1, 2, 37, 6, device=KERNEL_DEVICE, requires_grad=True)
               for _ in range(3))
    torch.library.opcheck(fused.linear_infsa_forward, (q, None if tied else k, v, 1e-6),
                          test_utils=('test_schema', 'test_faketensor',
                                      'test_autograd_registration'))


@driver
def test_kernels_in_interpreter():
    assert run_in_interpreter(__file__) >= 15


@pytest.mark.cuda
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
@pytest.mark.parametrize('tied', [True, False])
def test_cuda_kernels_large(dtype, tied):
    assert linear_infsa_backend(*head_views(1, 1, 2, 4, dtype, 'cuda')) == 'triton'
    check(linear_infsa_context, 2, 48, 16384 + 3, 16, tied, dtype, 'cuda')
