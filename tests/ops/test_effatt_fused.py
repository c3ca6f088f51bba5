"""EFFATT backends (ELFATT's global head): the torch form and the Triton kernels
vs the explicit N x N formula. Kernel tests run natively on CUDA, or on CPU in
Triton's interpreter through ``test_kernels_in_interpreter`` (tests/_triton.py).
"""
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests._triton import KERNEL_DEVICE, driver, needs_kernels, run_in_interpreter
from mmhybrid.ops.elfatt import effatt, naive_effatt
from mmhybrid.ops.elfatt.effatt import effatt_backend

ENV = 'MMHYBRID_BACKEND'
# output rtol/atol and gradient relative-error bound vs float64, per dtype
PRECISION = {torch.float64: (1e-10, 1e-9), torch.float32: (1e-4, 1e-4),
             torch.float16: (1e-2, 1e-2), torch.bfloat16: (5e-2, 5e-2)}


def check(fn, B, H, N, d, dtype, device, **kwargs):
    """``fn(q, k, v)`` on head views of (B, N, H*d) tensors vs float64 naive EFFATT."""
    raw = [2 * torch.randn(B, N, H * d, dtype=torch.float64) for _ in range(3)]

    def heads(t, dt, dev):
        return t.to(dev, dt).view(B, N, H, d).transpose(1, 2).requires_grad_()

    ref_in = [heads(t, torch.float64, 'cpu') for t in raw]
    inputs = [heads(t, dtype, device) for t in raw]
    out, ref = fn(*inputs, **kwargs), naive_effatt(*ref_in)
    tol, grad_tol = PRECISION[dtype]
    assert out.dtype == dtype and out.shape == ref.shape
    torch.testing.assert_close(out.cpu().double(), ref, rtol=tol, atol=tol)
    grad = torch.randn_like(ref)
    got = torch.autograd.grad(out, inputs, grad.to(device, dtype))
    for a, b in zip(got, torch.autograd.grad(ref, ref_in, grad)):
        assert a.dtype == dtype
        # relative error, floored for near-zero gradients (N = 1: dQ = dK = 0)
        err = (a.cpu().double() - b).norm() / max(b.norm().item(), 1e-3)
        assert err < grad_tol, err


@pytest.mark.parametrize('dtype', [torch.float64, torch.float32, torch.bfloat16])
def test_torch_form_matches_naive(dtype):
    check(effatt, 2, 3, 197, 12, dtype, 'cpu', backend='torch')


def test_torch_form_makes_no_float32_or_matmul_copies():
    """bf16 head views: the token-sized tensors made are the two softmaxes and the
    output, all bf16 (no float32 copies, no matmul copy of a head view)."""
    B, H, N, d = 2, 3, 300, 8
    q, k, v = (torch.randn(B, N, H * d).bfloat16().view(B, N, H, d).transpose(1, 2)
               for _ in range(3))
    inputs = {t.untyped_storage().data_ptr() for t in (q, k, v)}
    made = []  # keeps every tensor alive, so no storage is reused

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor) and out.numel() >= N * d:
                made.append(out)
            return out

    with Record():
        effatt(q, k, v, backend='torch')
    new = {t.untyped_storage().data_ptr(): t.dtype for t in made}
    for ptr in inputs:
        new.pop(ptr, None)
    assert len(new) == 3 and set(new.values()) == {torch.bfloat16}, new


def test_backend_choice_and_env(monkeypatch):
    q = torch.randn(1, 2, 5, 4)
    monkeypatch.delenv(ENV, raising=False)
    assert effatt_backend(q, q, q) == 'torch'
    monkeypatch.setenv(ENV, 'effatt=bogus')
    with pytest.raises(ValueError, match="unknown effatt backend 'bogus'"):
        effatt(q, q, q)
    monkeypatch.setenv(ENV, 'triton')
    assert effatt_backend(q, q, q, backend='torch') == 'torch'
    if KERNEL_DEVICE is None:
        pytest.importorskip('triton')
        with pytest.raises(RuntimeError, match='triton backend: .*need CUDA'):
            effatt(q, q, q)


def test_works_without_triton(monkeypatch):
    """No Triton: the op imports and runs on the torch path; forcing triton says why."""
    monkeypatch.setitem(sys.modules, 'triton', None)  # import triton -> ImportError
    monkeypatch.delitem(sys.modules, 'mmhybrid.ops.elfatt.fused', raising=False)
    monkeypatch.delenv(ENV, raising=False)
    q, k, v = (torch.randn(1, 2, 9, 4, dtype=torch.float64) for _ in range(3))
    torch.testing.assert_close(effatt(q, k, v), naive_effatt(q, k, v))
    with pytest.raises(RuntimeError, match='triton does not import'):
        effatt(q, k, v, backend='triton')


@needs_kernels
@pytest.mark.parametrize('N', [1, 7, 197, 1000])
def test_kernels_exact_in_float64(N):
    check(effatt, 1, 1, N, 12, torch.float64, KERNEL_DEVICE, backend='triton')
    if N == 197:  # N split over 4 programs, ragged tiles, d = 5, B and H > 1
        from mmhybrid.ops.elfatt.fused import triton_effatt
        check(triton_effatt, 2, 2, N, 5, torch.float64, KERNEL_DEVICE, block_n=32,
              rows_per_program=64)


@needs_kernels
@pytest.mark.parametrize('dtype', [torch.float32, torch.float16, torch.bfloat16])
def test_kernels_low_precision(dtype):
    check(effatt, 1, 2, 197, 12, dtype, KERNEL_DEVICE, backend='triton')


@needs_kernels
def test_kernels_large_logits_are_stable():
    """Keys of +-60: the online column softmax rescales instead of overflowing."""
    q, k, v = (torch.randn(1, 2, 150, 8, dtype=torch.float64, device=KERNEL_DEVICE)
               for _ in range(3))
    k = k * 60
    out = effatt(q.float(), k.float(), v.float(), backend='triton')
    torch.testing.assert_close(out.double(), naive_effatt(q, k, v).to(out.device),
                               rtol=1e-4, atol=1e-4)


@needs_kernels
def test_custom_ops_pass_opcheck():
    """Schema, fake kernels and registered autograd of the custom ops agree with the
    kernels (torch.library.opcheck), on head views (strided inputs)."""
    from mmhybrid.ops.elfatt import fused
    q, k, v = (torch.randn(1, 37, 2 * 6, device=KERNEL_DEVICE).view(1, 37, 2, 6)
               .transpose(1, 2).requires_grad_() for _ in range(3))
    torch.library.opcheck(fused.effatt_forward, (q, k, v),
                          test_utils=('test_schema', 'test_faketensor',
                                      'test_autograd_registration'))


@driver
def test_kernels_in_interpreter():
    assert run_in_interpreter(__file__) >= 8


@pytest.mark.cuda
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_cuda_kernels_large(dtype):
    q = torch.randn(1, 1, 2, 16, device='cuda', dtype=dtype)
    assert effatt_backend(q, q, q) == 'triton'
    check(effatt, 2, 4, 3136 + 17, 32, dtype, 'cuda')
