"""ELFATT heads (mmhybrid.ops.effatt / block_attention / window_block_attention)
against naive references."""
import pytest
import torch

from mmhybrid.ops import block_attention, effatt
from mmhybrid.ops.elfatt import (map_windows, naive_block_attention, naive_effatt,
                                 naive_window_block_attention, window_block_attention,
                                 window_regions)

SHAPES = [  # (B, heads, N, d, block_size): N divisible or not by the block size
    (2, 3, 50, 8, 7),
    (1, 2, 49, 16, 49),
    (2, 1, 13, 4, 32),   # one short block only
    (1, 4, 131, 8, 16),
]


def _qkv(B, h, N, d, std=2., requires_grad=False):
    return [(torch.randn(B, h, N, d, dtype=torch.float64) * std).requires_grad_(
        requires_grad)
            for _ in range(3)]


@pytest.mark.parametrize('B,h,N,d,bs', SHAPES)
def test_block_attention_matches_reference(B, h, N, d, bs):
    q, k, v = _qkv(B, h, N, d)
    torch.testing.assert_close(block_attention(q, k, v, bs),
                               naive_block_attention(q, k, v, bs))


@pytest.mark.parametrize('B,h,N,d,_', SHAPES)
def test_effatt_matches_reference(B, h, N, d, _):
    q, k, v = _qkv(B, h, N, d)
    torch.testing.assert_close(effatt(q, k, v), naive_effatt(q, k, v))


def test_block_attention_is_local_and_whole_block_is_global():
    q, k, v = _qkv(1, 2, 20, 4)
    out = block_attention(q, k, v, 8)
    v2 = v.clone()
    v2[:, :, 16:] += 1.0  # only the last (short) block sees this
    out2 = block_attention(q, k, v2, 8)
    torch.testing.assert_close(out[:, :, :16], out2[:, :, :16])
    assert not torch.allclose(out[:, :, 16:], out2[:, :, 16:])
    full = torch.softmax(q @ k.transpose(-2, -1) / 2.0, -1) @ v
    torch.testing.assert_close(block_attention(q, k, v, 20), full)
    torch.testing.assert_close(block_attention(q, k, v, 64), full)


# (H, W, window): aligned, ragged right/bottom/corner, window larger than the grid,
# one-token windows, single rows and columns, rectangular windows
GRIDS = [(14, 14, 7), (9, 11, 4), (5, 13, 3), (6, 4, 7), (1, 10, 4), (11, 1, 3),
         (5, 5, 1), (7, 9, (2, 4)), (9, 5, (4, 1))]


@pytest.mark.parametrize('H,W,w', GRIDS)
def test_window_block_attention_matches_masked_reference(H, W, w):
    q, k, v = _qkv(2, 3, H * W, 8)
    torch.testing.assert_close(window_block_attention(q, k, v, (H, W), w),
                               naive_window_block_attention(q, k, v, (H, W), w))


def test_window_regions_tile_the_grid():
    for H, W, w in GRIDS:
        seen = torch.zeros(H, W, dtype=torch.long)
        side_h, side_w = (w, w) if isinstance(w, int) else w
        for rows, cols, (wh, ww) in window_regions((H, W), w):
            assert (rows.stop - rows.start) % wh == 0 and wh <= side_h
            assert (cols.stop - cols.start) % ww == 0 and ww <= side_w
            seen[rows, cols] += 1
        assert (seen == 1).all()
    x = torch.randn(2, 3, 9 * 11, 5)
    torch.testing.assert_close(map_windows(lambda t, size: t, (x, ), (9, 11), 4), x)
    with pytest.raises(ValueError, match='grid'):
        map_windows(lambda t, size: t, (x, ), (9, 10), 4)


def test_window_layout_is_square_windows_not_rows():
    """A 2x2 window of a 4x4 grid holds tokens {0, 1, 4, 5}; the 1D block of 4
    tokens holds {0, 1, 2, 3}."""
    q, k, v = _qkv(1, 1, 16, 4)
    v2 = v.clone()
    v2[:, :, 4] += 1.0  # the token below token 0
    moved = (window_block_attention(q, k, v2, (4, 4), 2)
             - window_block_attention(q, k, v, (4, 4), 2)).abs().amax(-1)[0, 0]
    assert moved.nonzero().flatten().tolist() == [0, 1, 4, 5]
    moved_1d = (block_attention(q, k, v2, 4) - block_attention(q, k, v, 4)).abs()
    assert moved_1d.amax(-1)[0, 0].nonzero().flatten().tolist() == [4, 5, 6, 7]


@pytest.mark.parametrize('op', ['effatt', 'block', 'window'])
def test_gradients_match_reference(op):
    fast, ref = {
        'effatt': (effatt, naive_effatt),
        'block': (lambda q, k, v: block_attention(q, k, v, 9),
                  lambda q, k, v: naive_block_attention(q, k, v, 9)),
        'window': (lambda q, k, v: window_block_attention(q, k, v, (5, 7), 3),
                   lambda q, k, v: naive_window_block_attention(q, k, v, (5, 7), 3)),
    }[op]
    N = 35 if op == 'window' else 31
    q, k, v = _qkv(2, 2, N, 8, requires_grad=True)
    grad_out = torch.randn(2, 2, N, 8, dtype=torch.float64)
    g_fast = torch.autograd.grad((fast(q, k, v) * grad_out).sum(), (q, k, v))
    g_ref = torch.autograd.grad((ref(q, k, v) * grad_out).sum(), (q, k, v))
    for a, b in zip(g_fast, g_ref):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize('dtype,tol', [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
@pytest.mark.parametrize('op', ['effatt', 'block', 'window'])
def test_low_precision_close_to_float64(dtype, tol, op):
    fn, ref = {
        'effatt': (effatt, naive_effatt),
        'block': (lambda q, k, v: block_attention(q, k, v, 10),
                  lambda q, k, v: naive_block_attention(q, k, v, 10)),
        'window': (lambda q, k, v: window_block_attention(q, k, v, (47, 1), 4),
                   lambda q, k, v: naive_window_block_attention(q, k, v, (47, 1), 4)),
    }[op]
    q, k, v = _qkv(2, 3, 47, 16, std=1., requires_grad=True)
    low = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
    out = fn(*low)
    assert out.dtype == dtype
    expected = ref(q, k, v)
    torch.testing.assert_close(out.double(), expected, atol=tol, rtol=tol)
    grad_out = torch.randn_like(expected)
    g_low = torch.autograd.grad((out.double() * grad_out).sum(), low)
    g_ref = torch.autograd.grad((expected * grad_out).sum(), (q, k, v))
    for a, b in zip(g_low, g_ref):
        scale = b.abs().max()
        assert (a.double() - b).abs().max() <= 4 * tol * scale


def test_shape_errors():
    q = torch.randn(1, 2, 10, 4)
    with pytest.raises(ValueError):
        block_attention(q, q, q, 0)
    with pytest.raises(ValueError):
        effatt(q, q[:, :, :5], q)
    with pytest.raises(ValueError):
        window_block_attention(q, q, q, (2, 5), 0)
    with pytest.raises(ValueError):
        window_block_attention(q, q[..., :3], q, (2, 5), 2)


@pytest.mark.cuda
@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
def test_cuda_fused_kernels_match_reference(dtype):
    q, k, v = _qkv(2, 4, 3136 + 17, 32, std=1.)
    ref_block = naive_block_attention(q, k, v, 49)
    ref_eff = naive_effatt(q, k, v)
    q, k, v = (t.cuda().to(dtype) for t in (q, k, v))
    torch.testing.assert_close(block_attention(q, k, v, 49).double().cpu(), ref_block,
                               atol=2e-2, rtol=2e-2)
    wq, wk, wv = _qkv(2, 4, 53 * 59, 32, std=1.)  # ragged right and bottom windows
    ref_window = naive_window_block_attention(wq, wk, wv, (53, 59), 7)
    out = window_block_attention(*(t.cuda().to(dtype) for t in (wq, wk, wv)), (53, 59), 7)
    torch.testing.assert_close(out.double().cpu(), ref_window, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(effatt(q, k, v).double().cpu(), ref_eff,
                               atol=2e-2, rtol=2e-2)
