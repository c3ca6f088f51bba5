"""2D sliding-window attention: halo tiles vs the explicit N x N mask."""
import itertools

import pytest
import torch
import torch.nn.functional as F

from mmhybrid.ops import sliding_window_attention
from mmhybrid.ops.sliding_window import halo, neighbourhood_mask


def qkv(B, heads, H, W, d, dtype=torch.float64):
    return [torch.randn(B, heads, H * W, d, dtype=dtype) for _ in range(3)]


def test_mask_is_the_clamped_neighbourhood():
    H, W, (wh, ww) = 9, 12, (5, 3)
    mask = neighbourhood_mask((H, W), (wh, ww)).view(H, W, H, W)
    for r, c in itertools.product(range(H), range(W)):
        r0 = min(max(r - wh // 2, 0), H - wh)
        c0 = min(max(c - ww // 2, 0), W - ww)
        expected = torch.zeros(H, W, dtype=torch.bool)
        expected[r0:r0 + wh, c0:c0 + ww] = True
        assert torch.equal(mask[r, c], expected), (r, c)
        if wh // 2 <= r < H - wh // 2 and ww // 2 <= c < W - ww // 2:
            assert mask[r, c, r - wh // 2:r + wh // 2 + 1,
                        c - ww // 2:c + ww // 2 + 1].all()  # centred inside
    # a map smaller than the window is seen whole along that axis
    small = neighbourhood_mask((3, 20), (7, 7))
    assert (small.sum(1) == 3 * 7).all()


@pytest.mark.parametrize('H,W', [(1, 1), (3, 5), (7, 7), (9, 4), (13, 20),
                                 (20, 13)])
def test_halo_matches_naive(H, W):
    q, k, v = qkv(2, 3, H, W, 8)
    for window, tile in itertools.product((1, 3, 7, (3, 5)),
                                          (None, 3, (4, 6), 16)):
        ref = sliding_window_attention(q, k, v, (H, W), window,
                                       backend='naive')
        out = sliding_window_attention(q, k, v, (H, W), window, tile_size=tile)
        torch.testing.assert_close(out, ref, msg=f'window {window} tile {tile}')


@pytest.mark.parametrize('H,W,window', [(11, 17, 5), (6, 9, 7), (16, 16, 3)])
def test_halo_gradients_match_naive(H, W, window):
    tensors = qkv(2, 2, H, W, 6)
    out = []
    for backend in ('naive', 'halo'):
        q, k, v = (t.clone().requires_grad_() for t in tensors)
        o = sliding_window_attention(q, k, v, (H, W), window, backend=backend)
        torch.manual_seed(1)
        (o * torch.randn(o.shape, dtype=o.dtype)).sum().backward()
        out.append([o, q.grad, k.grad, v.grad])
    for a, b in zip(*out):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize('band_queries', [1, 700, halo.BAND_QUERIES])
def test_default_tiles_on_a_map_larger_than_the_window(band_queries, monkeypatch):
    """7x7 windows on a 30x37 map: the default (8x8) tiles with border tiles
    that are partly padding; forward and gradients against the N x N mask, and
    inference in bands of 1, 2 or all 4 tile rows (eager's streaming)."""
    monkeypatch.setattr(halo, 'BAND_QUERIES', band_queries)
    tensors = qkv(1, 2, 30, 37, 8)
    with torch.no_grad():
        torch.testing.assert_close(
            sliding_window_attention(*tensors, (30, 37), 7),
            sliding_window_attention(*tensors, (30, 37), 7, backend='naive'))
    out = []
    for backend in ('naive', 'halo'):
        q, k, v = (t.clone().requires_grad_() for t in tensors)
        o = sliding_window_attention(q, k, v, (30, 37), 7, backend=backend)
        torch.manual_seed(1)
        (o * torch.randn(o.shape, dtype=o.dtype)).sum().backward()
        out.append([o, q.grad, k.grad, v.grad])
    for a, b in zip(*out):
        torch.testing.assert_close(a, b)


def test_window_covering_the_map_is_global_attention():
    q, k, v = qkv(1, 2, 5, 7, 8)
    out = sliding_window_attention(q, k, v, (5, 7), 7)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))


def test_bfloat16():
    q, k, v = qkv(2, 2, 15, 10, 16)
    ref = sliding_window_attention(q, k, v, (15, 10), 5, backend='naive')
    out = sliding_window_attention(*(t.bfloat16() for t in (q, k, v)),
                                   (15, 10), 5)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), ref, rtol=0.05, atol=0.05)


def test_errors():
    q, k, v = qkv(1, 2, 4, 4, 8)
    with pytest.raises(ValueError, match='odd'):
        sliding_window_attention(q, k, v, (4, 4), 4)
    with pytest.raises(ValueError, match='H\\*W = 20'):
        sliding_window_attention(q, k, v, (4, 5), 3)
    with pytest.raises(ValueError, match='positive'):
        sliding_window_attention(q, k, v, (4, 4), 0)
    with pytest.raises(KeyError, match='unknown sliding_window_attention backend'):
        sliding_window_attention(q, k, v, (4, 4), 3, backend='natten')


def test_halo_traces_for_export():
    """Tile indices and mask come from aranges of the sizes (no cache keyed on
    sizes): torch.export traces the op and the program matches eager."""
    q, k, v = (t.float() for t in qkv(1, 2, 12, 20, 8))

    class Op(torch.nn.Module):
        def forward(self, q, k, v):
            return sliding_window_attention(q, k, v, (12, 20), 5, tile_size=6)

    exported = torch.export.export(Op(), (q, k, v)).module()
    torch.testing.assert_close(exported(q, k, v), Op()(q, k, v))
