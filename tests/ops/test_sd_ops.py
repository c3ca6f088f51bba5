"""Ops of ELFATT-SD: ToMe matching/merge, agent attention, ELFATT-SD head split,
each against a plain reference."""
import subprocess
import sys

import pytest
import torch

from mmhybrid.diffusion import elfatt_sd_attention
from mmhybrid.ops import agent_attention, bipartite_soft_matching, merge_tokens, unmerge_tokens
from mmhybrid.ops.agent import agent_grid, naive_agent_attention, pool_agent_tokens
from mmhybrid.ops.elfatt import naive_block_attention
from mmhybrid.ops.tome import naive_tome_merge, random_dst_mask


@pytest.mark.parametrize('hw,stride', [((7, 9), (2, 2)), ((8, 8), (2, 2)), ((5, 6), (3, 2)),
                                       ((1, 11), (1, 2))])
def test_dst_mask_one_per_complete_window(hw, stride):
    H, W = hw
    sy, sx = stride
    for generator in (None, torch.Generator().manual_seed(1)):
        mask = random_dst_mask(hw, stride, generator).view(H, W)
        windows = mask[:H // sy * sy, :W // sx * sx].reshape(H // sy, sy, W // sx, sx)
        assert (windows.sum(dim=(1, 3)) == 1).all()
        assert mask.sum() == (H // sy) * (W // sx)
    assert random_dst_mask(hw, stride, None).view(H, W)[0, 0]


@pytest.mark.parametrize('hw,r', [((7, 9), 0), ((7, 9), 1), ((7, 9), 17), ((7, 9), 1000),
                                  ((6, 10), 30)])
def test_tome_merge_matches_reference(hw, r):
    N = hw[0] * hw[1]
    x = torch.randn(2, N, 6, dtype=torch.float64)
    metric = torch.randn(2, N, 4, dtype=torch.float64)
    dst = random_dst_mask(hw, (2, 2), torch.Generator().manual_seed(0))
    slot, num_slots = bipartite_soft_matching(metric, dst, r)
    merged = merge_tokens(x, slot, num_slots)
    ref, groups = naive_tome_merge(x, metric, dst, r)
    assert num_slots == ref.shape[1] == N - min(r, int((~dst).sum()))
    torch.testing.assert_close(merged, ref)
    # unmerge: every token gets the value of the group it was merged into
    y = torch.randn(2, num_slots, 3, dtype=torch.float64)
    back = unmerge_tokens(y, slot)
    for b in range(2):
        for j, members in enumerate(groups[b]):
            for p in members:
                assert torch.equal(back[b, p], y[b, j])


def test_tome_merge_bf16_and_gradients():
    x = torch.randn(2, 24, 4, dtype=torch.float64, requires_grad=True)
    dst = random_dst_mask((4, 6), (2, 2), None)
    slot, n = bipartite_soft_matching(x.detach(), dst, 10)
    out = unmerge_tokens(merge_tokens(x, slot, n), slot)
    torch.autograd.gradcheck(lambda t: unmerge_tokens(merge_tokens(t, slot, n), slot), (x,))
    low = unmerge_tokens(merge_tokens(x.detach().bfloat16(), slot, n), slot)
    assert low.dtype == torch.bfloat16
    torch.testing.assert_close(low.double(), out.detach(), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize('B,h,N,n,d', [(2, 3, 50, 7, 8), (1, 1, 13, 13, 4), (2, 2, 131, 1, 16)])
def test_agent_attention_matches_reference(B, h, N, n, d):
    q, k, v = (torch.randn(B, h, N, d, dtype=torch.float64) * 2 for _ in range(3))
    a = torch.randn(B, h, n, d, dtype=torch.float64) * 2
    torch.testing.assert_close(agent_attention(q, k, v, a), naive_agent_attention(q, k, v, a))
    torch.testing.assert_close(agent_attention(q, k, v, a, scale=0.3),
                               naive_agent_attention(q, k, v, a, scale=0.3))
    # Agent-SD's extras: broadcast scale d^(-0.5 * 0.3), V shortcut 0.075
    extras = dict(broadcast_scale=d ** (-0.5 * 0.3), shortcut=0.075)
    out = agent_attention(q, k, v, a, **extras)
    torch.testing.assert_close(out, naive_agent_attention(q, k, v, a, **extras))
    assert not torch.allclose(out, agent_attention(q, k, v, a))


def test_agent_attention_bf16_and_gradients():
    inputs = [torch.randn(2, 2, 30, 8, dtype=torch.float64, requires_grad=True)
              for _ in range(4)]
    inputs[3] = inputs[3][:, :, :5].detach().requires_grad_()  # the agents
    grad_out = torch.randn(2, 2, 30, 8, dtype=torch.float64)
    grads = torch.autograd.grad(agent_attention(*inputs), inputs, grad_out)
    ref_grads = torch.autograd.grad(naive_agent_attention(*inputs), inputs, grad_out)
    for g, ref in zip(grads, ref_grads):
        torch.testing.assert_close(g, ref)
    low = agent_attention(*(t.detach().bfloat16() for t in inputs))
    ref = naive_agent_attention(*(t.detach() for t in inputs))
    torch.testing.assert_close(low.double(), ref, atol=3e-2, rtol=3e-2)


def _naive_pool(x, hw, grid):
    """Adaptive average pooling written as explicit window means."""
    H, W = hw
    gh, gw = grid
    x = x.view(x.shape[0], H, W, -1)
    rows = [(i * H // gh, -(-(i + 1) * H // gh)) for i in range(gh)]
    cols = [(j * W // gw, -(-(j + 1) * W // gw)) for j in range(gw)]
    return torch.stack([x[:, r0:r1, c0:c1].mean(dim=(1, 2)) for r0, r1 in rows
                        for c0, c1 in cols], dim=1)


@pytest.mark.parametrize('hw,num', [((8, 8), None), ((7, 9), None), ((64, 64), None),
                                    ((6, 10), 15), ((5, 5), 1)])
def test_agent_pooling(hw, num):
    grid = agent_grid(hw, num)
    if num is None:  # N/16 agents, Agent-SD's count: one per 4x4 window
        assert grid == (-(-hw[0] // 4), -(-hw[1] // 4))
    else:
        assert abs(grid[0] * grid[1] - num) <= max(grid)
    x = torch.randn(2, hw[0] * hw[1], 3, dtype=torch.float64)
    torch.testing.assert_close(pool_agent_tokens(x, hw, grid), _naive_pool(x, hw, grid))


@pytest.mark.parametrize('heads,global_heads,N,bs', [(4, 2, 50, 16), (5, 2, 37, 8), (2, 0, 20, 6),
                                                      (3, 3, 20, 6)])
def test_elfatt_sd_attention_head_split(heads, global_heads, N, bs):
    q, k, v = (torch.randn(2, heads, N, 8, dtype=torch.float64) for _ in range(3))
    a = torch.randn(2, global_heads, 6, 8, dtype=torch.float64)
    out = elfatt_sd_attention(q, k, v, a, bs, global_heads)
    g = global_heads
    ref = torch.cat([naive_agent_attention(q[:, :g], k[:, :g], v[:, :g], a),
                     naive_block_attention(q[:, g:], k[:, g:], v[:, g:], bs)], dim=1)
    torch.testing.assert_close(out, ref)


def test_mmhybrid_diffusion_imports_without_diffusers():
    code = ("import sys; sys.modules['diffusers'] = None; "
            "import mmhybrid.diffusion; print(mmhybrid.diffusion.apply_patch.__name__)")
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith('apply_patch')
