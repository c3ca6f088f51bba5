"""InfSA ops (Roffo & Palmer): fast paths vs the naive formulas, and the spectra."""
import pytest
import torch

from mmhybrid.ops import linear_infsa, pure_infsa
from mmhybrid.ops.infsa import (chunk_pure_infsa, eigen_alignment,
                                linear_infsa_context, linear_infsa_weights,
                                naive_linear_infsa, naive_pure_infsa,
                                perron_vector)
from mmhybrid.ops.heads import rows_per_block


def qkv(B, H, N, d, dtype=torch.float64, grad=False, shift=0.):
    return [(torch.randn(B, H, N, d, dtype=dtype) + shift).requires_grad_(grad)
            for _ in range(3)]


# (B, H, N, d, block_elements): one token, one block, many ragged blocks, 1-row blocks
PURE_CASES = [(2, 3, 1, 5, 1 << 20), (2, 3, 37, 8, 1 << 20), (1, 2, 130, 16, 2000),
              (2, 1, 33, 7, 1)]


@pytest.mark.parametrize('B,H,N,d,block', PURE_CASES)
def test_pure_chunk_matches_naive_forward_and_grad(B, H, N, d, block):
    q, k, v = qkv(B, H, N, d, grad=True)
    ref = naive_pure_infsa(q, k, v)
    out = chunk_pure_infsa(q, k, v, block_elements=block)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    g = torch.randn_like(ref)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), g),
                    torch.autograd.grad(ref, (q, k, v), g)):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


def test_pure_gradcheck_and_custom_scale():
    q, k, v = qkv(1, 2, 9, 3, grad=True)
    assert torch.autograd.gradcheck(
        lambda q, k, v: chunk_pure_infsa(q, k, v, scale=0.3, block_elements=20),
        (q, k, v))
    torch.testing.assert_close(
        pure_infsa(q, k, v, scale=0.3), naive_pure_infsa(q, k, v, scale=0.3))


def test_pure_frobenius_normalisation():
    """||A||_F = 1 (up to eps) for every (batch, head): with V = I the output is A."""
    q, k, _ = qkv(2, 3, 11, 4)
    eye = torch.eye(11, dtype=q.dtype).expand(2, 3, 11, 11)
    attn = pure_infsa(q, k, eye)
    assert (attn >= 0).all()
    torch.testing.assert_close(attn.flatten(-2).norm(dim=-1),
                               torch.ones(2, 3, dtype=q.dtype), rtol=1e-5, atol=0)


def test_pure_bf16_close_to_fp32():
    q, k, v = qkv(2, 4, 70, 16, dtype=torch.float32, grad=True)
    ref = naive_pure_infsa(q, k, v)
    qb, kb, vb = [t.detach().bfloat16().requires_grad_() for t in (q, k, v)]
    out = chunk_pure_infsa(qb, kb, vb, block_elements=6000)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, rtol=5e-2, atol=2e-2)
    g = torch.randn_like(ref)
    (ref * g).sum().backward()
    (out.float() * g).sum().backward()
    for low, high in ((qb, q), (kb, k), (vb, v)):
        err = (low.grad.float() - high.grad).norm() / high.grad.norm()
        assert err < 5e-2


def test_pure_all_negative_scores_give_zero_and_finite_grads():
    q = torch.rand(1, 2, 6, 3, dtype=torch.float64, requires_grad=True)
    k = (-torch.rand(1, 2, 6, 3, dtype=torch.float64)).requires_grad_()
    v = torch.randn(1, 2, 6, 3, dtype=torch.float64, requires_grad=True)
    out = chunk_pure_infsa(q, k, v)
    assert out.abs().max() == 0
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    assert all(torch.isfinite(g).all() for g in grads)


def test_pure_block_size_bounds_memory():
    """16k tokens, 16 heads: a block holds ~2^25 numbers, never the N x N matrix."""
    q = torch.empty(1, 16, 16384, 64, device='meta')
    rows = rows_per_block(q, q, 1 << 25)
    assert rows == 128 and rows * 16384 * 16 <= 1 << 25


def test_neumann_series_through_stacked_layers():
    """Eq. 9-10: with A fixed, sum_t gamma^t A^t V -> ((I - gamma A)^-1 - I) V.

    Frobenius normalisation gives rho(A) <= ||A||_F <= 1, so the series converges
    for any gamma < 1; each hop is one call of the op on the previous output.
    """
    q, k, v = qkv(1, 2, 12, 4)
    gamma = 0.7
    hop, total = v, torch.zeros_like(v)
    for t in range(1, 120):
        hop = pure_infsa(q, k, hop)
        total = total + gamma**t * hop
    eye = torch.eye(12, dtype=v.dtype)
    attn = pure_infsa(q, k, eye.expand(1, 2, 12, 12))
    assert torch.linalg.eigvals(attn).abs().max() <= 1 + 1e-9
    closed = (torch.linalg.inv(eye - gamma * attn) - eye) @ v
    torch.testing.assert_close(total, closed, rtol=1e-9, atol=1e-10)


def test_pure_dispatch_errors():
    q, k, v = qkv(1, 1, 4, 2)
    with pytest.raises(KeyError, match='unknown pure_infsa backend'):
        pure_infsa(q, k, v, backend='nope')
    with pytest.raises(ValueError, match='B, heads, N, d'):
        pure_infsa(q[0], k[0], v[0])


@pytest.mark.parametrize('B,H,N,d', [(2, 3, 1, 5), (2, 3, 37, 8), (1, 4, 257, 12)])
@pytest.mark.parametrize('tied', [True, False])
def test_linear_matches_naive_forward_and_grad(B, H, N, d, tied):
    q, k, v = qkv(B, H, N, d, grad=True, shift=0.3)
    if tied:
        k = q
    out = linear_infsa(q, k, v)
    ref = naive_linear_infsa(q, k, v)
    assert out.shape == (B, H, N, d)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    g = torch.randn_like(ref)
    inputs = (q, v) if tied else (q, k, v)
    for a, b in zip(torch.autograd.grad(out, inputs, g),
                    torch.autograd.grad(ref, inputs, g)):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


def test_linear_state_is_o_d_and_broadcast_is_a_view():
    q, k, v = qkv(2, 3, 50, 6)
    context = linear_infsa_context(q, q, v)
    assert context.shape == (2, 3, 1, 6)
    out = linear_infsa(q, q, v)
    assert out.stride(-2) == 0  # no (N, d) copy
    weights = linear_infsa_weights(q, q)
    assert (weights >= 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, dtype=q.dtype),
                               rtol=1e-6, atol=0)


def test_linear_bf16_close_to_fp32():
    q, k, v = qkv(2, 4, 300, 16, dtype=torch.float32, shift=0.5)
    out = linear_infsa(q.bfloat16(), k.bfloat16(), v.bfloat16())
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), naive_linear_infsa(q, k, v),
                               rtol=3e-2, atol=3e-2)


def test_perron_vector_matches_eigh():
    x = torch.randn(3, 20, 5, dtype=torch.float64)
    sym = torch.relu(x @ x.transpose(-2, -1))
    vals, vecs = torch.linalg.eigh(sym)
    top = vecs[..., -1].abs()
    torch.testing.assert_close(perron_vector(sym, 500), top / top.sum(-1, keepdim=True),
                               rtol=1e-6, atol=1e-9)


def test_eigenvector_alignment():
    """Supplement Sec. 8: cos(a, Perron vector of ReLU(QQ^T)).

    Token features share a common direction in trained ViTs; with a common mean
    (||mean|| = half the noise norm) alignment is ~0.997 (paper: 0.985 on a trained
    checkpoint). Isotropic zero-mean queries are the worst case (~0.74): the central
    query is then nearly random. projects/infsa_eigen_alignment sweeps the shift.
    """
    torch.manual_seed(0)
    shifted = eigen_alignment(torch.randn(2, 8, 196, 16) + 0.5)
    isotropic = eigen_alignment(torch.randn(2, 8, 196, 16))
    print(f'cosine: shifted {shifted.mean():.4f} (min {shifted.min():.4f}), '
          f'isotropic {isotropic.mean():.4f}')
    assert shifted.mean() > 0.99 and shifted.min() > 0.98
    assert isotropic.mean() > 0.6


def test_pure_float16_large_scores_do_not_overflow():
    """Unnormalised R V would exceed fp16's range; the fp16 path normalises first."""
    q, k, v = qkv(1, 2, 300, 8, dtype=torch.float32)
    q, k, v = 9 * q.abs(), 9 * k.abs(), v.abs() + 1
    ref = naive_pure_infsa(q, k, v)
    assert (torch.relu(q @ k.transpose(-2, -1) * 8**-0.5) @ v).max() > 1e5
    out = chunk_pure_infsa(q.half(), k.half(), v.half(), block_elements=30000)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=1e-3)
