"""Historical attention op (HAViT Eq. 5-7): the blocked path vs the naive formula."""
import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from mmhybrid.ops import historical_attention
from mmhybrid.ops.historical_attention import (chunk_historical_attention,
                                               naive_historical_attention)


def qkv(B, H, N, d, dtype=torch.float64, grad=True):
    return [torch.randn(B, H, N, d, dtype=dtype).requires_grad_(grad)
            for _ in range(3)]


def grads(out, history, inputs, g_out, g_hist):
    loss = (out * g_out).sum()
    if history is not None:
        loss = loss + (history * g_hist).sum()
    return torch.autograd.grad(loss, inputs)


# (B, H, N, d, block_elements, history batch or None, return_history):
# one token, one block, ragged blocks, one-row blocks, a batch-shared history,
# no incoming history, no returned history, and a 1000+ token sequence.
CASES = [(2, 3, 1, 5, 1 << 20, 2, True), (2, 3, 7, 8, 1 << 20, 2, True),
         (1, 2, 197, 16, 3000, 1, True), (2, 1, 33, 7, 1, 2, True),
         (3, 2, 20, 4, 100, 1, False), (2, 2, 45, 6, 500, None, True),
         (1, 1, 1030, 8, 1 << 16, 1, True)]


@pytest.mark.parametrize('B,H,N,d,block,hist_batch,ret', CASES)
def test_chunk_matches_naive_forward_and_grad(B, H, N, d, block, hist_batch, ret):
    q, k, v = qkv(B, H, N, d)
    history = (None if hist_batch is None else
               torch.randn(hist_batch, H, N, N, dtype=q.dtype, requires_grad=True))
    ref, ref_hist = naive_historical_attention(q, k, v, history, alpha=0.45)
    out, new_hist = chunk_historical_attention(q, k, v, history, alpha=0.45,
                                               return_history=ret,
                                               block_elements=block)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    if ret:
        torch.testing.assert_close(new_hist, ref_hist, rtol=1e-12, atol=1e-12)
    else:
        assert new_hist is None
    inputs = (q, k, v) + (() if history is None else (history, ))
    g_out, g_hist = torch.randn_like(ref), torch.randn_like(ref_hist)
    for a, b in zip(grads(out, new_hist, inputs, g_out, g_hist),
                    grads(ref, ref_hist if ret else None, inputs, g_out, g_hist)):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


def test_gradcheck_through_two_layers():
    """Two chained calls (the history of the first feeds the second)."""
    q1, k1, v1, q2, k2, v2 = (torch.randn(2, 2, 6, 3, dtype=torch.float64,
                                          requires_grad=True) for _ in range(6))
    h0 = torch.randn(1, 2, 6, 6, dtype=torch.float64, requires_grad=True)

    def two_layers(q1, k1, v1, q2, k2, v2, h0):
        out1, h1 = chunk_historical_attention(q1, k1, v1, h0, 0.3, scale=0.7,
                                              block_elements=20)
        out2, _ = chunk_historical_attention(q2 + out1, k2, v2, h1, 0.6,
                                             return_history=False,
                                             block_elements=30)
        return out2

    assert torch.autograd.gradcheck(two_layers, (q1, k1, v1, q2, k2, v2, h0),
                                    fast_mode=True)


@pytest.mark.parametrize('backend', ['chunk', 'naive'])
def test_alpha_one_is_softmax_attention(backend):
    q, k, v = qkv(2, 3, 50, 8, dtype=torch.float32, grad=False)
    history = 5 * torch.randn(2, 3, 50, 50)
    out, new_hist = historical_attention(q, k, v, history, alpha=1.,
                                         backend=backend)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v),
                               rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(new_hist, q @ k.transpose(-2, -1) * 8**-0.5,
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('backend', ['chunk', 'naive'])
def test_alpha_zero_ignores_qk(backend):
    q, k, v = qkv(2, 2, 30, 4)
    history = torch.randn(2, 2, 30, 30, dtype=torch.float64)
    out, new_hist = historical_attention(q, k, v, history, alpha=0.,
                                         backend=backend)
    torch.testing.assert_close(out, torch.softmax(history, -1) @ v)
    torch.testing.assert_close(new_hist, history)
    grad_q, grad_k = torch.autograd.grad(out.sum() + new_hist.sum(), (q, k))
    assert grad_q.abs().max() == 0 and grad_k.abs().max() == 0
    other, _ = historical_attention(torch.randn_like(q), torch.randn_like(k), v,
                                    history, alpha=0., backend=backend)
    torch.testing.assert_close(other, out)


def test_zero_history_is_none():
    q, k, v = qkv(1, 2, 12, 4, grad=False)
    zero = torch.zeros(1, 2, 12, 12, dtype=q.dtype)
    for a, b in zip(historical_attention(q, k, v, None),
                    historical_attention(q, k, v, zero)):
        torch.testing.assert_close(a, b)


def test_bf16_close_to_fp32():
    q, k, v = qkv(2, 4, 197, 16, dtype=torch.float32)
    history = torch.randn(2, 4, 197, 197, requires_grad=True)
    ref, ref_hist = naive_historical_attention(q, k, v, history)
    qb, kb, vb = (t.detach().bfloat16().requires_grad_() for t in (q, k, v))
    out, new_hist = chunk_historical_attention(qb, kb, vb, history,
                                               block_elements=20000)
    assert out.dtype == torch.bfloat16 and new_hist.dtype == torch.float32
    torch.testing.assert_close(out.float(), ref, rtol=5e-2, atol=3e-2)
    torch.testing.assert_close(new_hist, ref_hist, rtol=2e-2, atol=3e-2)
    g_out, g_hist = torch.randn_like(ref), torch.randn_like(ref_hist)
    high = grads(ref, ref_hist, (q, k, v, history), g_out, g_hist)
    low = grads(out.float(), new_hist, (qb, kb, vb, history), g_out, g_hist)
    for a, b in zip(low, high):
        assert (a.float() - b).norm() / b.norm() < 5e-2


def test_dropout_is_replayed_in_backward():
    """Masks come from a generator seeded from the global RNG: same seed, same
    output, and gradcheck (which re-runs the forward) passes."""
    q, k, v = qkv(1, 2, 9, 3)
    h = torch.randn(1, 2, 9, 9, dtype=q.dtype, requires_grad=True)

    def fn(q, k, v, h):
        torch.manual_seed(7)
        out, new_hist = chunk_historical_attention(q, k, v, h, 0.45, dropout_p=0.3,
                                                   block_elements=30)
        return out, new_hist

    assert torch.autograd.gradcheck(fn, (q, k, v, h), fast_mode=True)
    dropped = fn(q, k, v, h)[0]
    torch.testing.assert_close(dropped, fn(q, k, v, h)[0])
    assert not torch.allclose(dropped, chunk_historical_attention(q, k, v, h)[0])


class LargestTensor(TorchDispatchMode):
    """Records the largest tensor any aten op returns (views included)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def test_blocks_bound_memory():
    """No tensor beyond a block (B, heads, rows, N) and the N x N history itself,
    in the forward and the backward pass."""
    B, H, N, d, block = 2, 2, 600, 8, 2 * 2 * 50 * 600
    q, k, v = qkv(B, H, N, d, dtype=torch.float32)
    history = torch.randn(1, H, N, N, requires_grad=True)
    with LargestTensor() as mode, torch.no_grad():
        chunk_historical_attention(q, k, v, history, return_history=False,
                                   block_elements=block)
    assert mode.largest == block  # history slices (1, H, rows, N) are smaller
    with LargestTensor() as mode:
        out, new_hist = chunk_historical_attention(q, k, v, history,
                                                   block_elements=block)
        (out.sum() + new_hist.sum()).backward()
    assert mode.largest == B * H * N * N  # the new history and its gradient


def test_errors():
    q, k, v = qkv(2, 2, 5, 3, grad=False)
    with pytest.raises(ValueError, match='history must be'):
        historical_attention(q, k, v, torch.zeros(2, 2, 5, 4))
    with pytest.raises(ValueError, match='alpha'):
        historical_attention(q, k, v, alpha=1.5)
    with pytest.raises(ValueError, match='B, heads, N, d'):
        historical_attention(q[0], k[0], v[0])
    with pytest.raises(KeyError, match='unknown historical_attention backend'):
        historical_attention(q, k, v, backend='flash')
