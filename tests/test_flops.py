"""FLOP counting (mmhybrid.analysis, tools/analysis/get_flops.py) against brute force.

Each op's count is checked against an independent count: torch's own
``FlopCounterMode`` (2 per multiply-add, no attention kernels on the CPU) on the
same code or on a plain reference, or the multiplications of an explicit loop.
"""
import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from mmhybrid.analysis import (Complexity, count_flops, register_flops,
                               wkv_macs)
from mmhybrid.analysis.flop_counter import FLOP_FORMULAS
from mmhybrid.analysis.paper_figures import PAPER_FIGURES
from mmhybrid.layers import SpatialMix
from mmhybrid.models.backbones import SoLAVision
from mmhybrid.ops import (bi_wkv, bipartite_soft_matching, block_attention,
                          effatt, linear_infsa, pure_infsa)
from mmhybrid.ops.infsa import naive_pure_infsa
from mmhybrid.ops.tome import random_dst_mask
from mmhybrid.ops.wkv import naive_bi_wkv

REPO = Path(__file__).resolve().parents[1]


def torch_macs(fn, *args):
    """Multiply-adds of ``fn(*args)`` by torch.utils.flop_counter (FLOPs / 2)."""
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        fn(*args)
    return counter.get_total_flops() // 2


class Call(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def ours(fn, *args):
    return count_flops(Call(fn), *args).total()


class Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.bn = nn.BatchNorm2d(8)
        self.ln = nn.LayerNorm(8)
        self.fc = nn.Linear(8, 16)

    def forward(self, x):
        x = self.bn(self.dw(self.conv(x)))
        t = self.fc(self.ln(x.flatten(2).transpose(1, 2)))
        q = t.view(1, -1, 2, 8).transpose(1, 2)
        return (self.up(x), torch.einsum('bhnd,bhmd->bhnm', q, q),
                F.interpolate(x, scale_factor=2, mode='bilinear'))


def test_generic_rules_follow_fvcore():
    model = Mixed().eval()
    x = torch.randn(1, 3, 10, 12)
    flops = count_flops(model, x)
    N = 120
    assert flops.total('conv') == N * 8 * 3 * 9
    assert flops.total('dw') == N * 8 * 9  # groups: 1 input channel per output
    assert flops.total('up') == N * 8 * 4 * 4  # transposed: per input pixel
    assert flops.total('fc') == N * 8 * 16
    assert flops.total('ln') == 5 * N * 8  # fvcore: 5 per element, affine
    assert flops.total('bn') == 2 * N * 8  # fvcore: eval BN, affine
    kinds = flops.by_kind()
    assert kinds['resample'] == 4 * 8 * 20 * 24  # bilinear: 4 per output
    # products and convolutions agree with torch's own counter
    assert kinds['matmul'] + kinds['conv'] == torch_macs(model, x)


@pytest.mark.parametrize('mask,Ev', [(False, 8), (True, 8), (False, 6)])
def test_attention_counts_qk_and_av(mask, Ev):
    B, h, L, S, E = 2, 3, 17, 11, 8
    q, k, v = torch.randn(B, h, L, E), torch.randn(B, h, S, E), torch.randn(B, h, S, Ev)
    attn_mask = torch.rand(L, S) > 0.3 if mask else None

    def explicit(q, k, v):
        logits = q @ k.transpose(-2, -1)
        if attn_mask is not None:
            logits = logits.masked_fill(~attn_mask, float('-inf'))
        return logits.softmax(-1) @ v

    def sdpa(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)

    expected = B * h * L * S * (E + Ev)
    assert torch_macs(explicit, q, k, v) == expected
    # one 'attention' op whichever kernel runs (E != Ev takes the math fallback)
    assert count_flops(Call(sdpa), q, k, v).by_kind() == {'attention': expected}
    if Ev == E and not mask:
        assert torch_macs(sdpa, q, k, v) == 0  # torch's counter misses the CPU kernel


def wkv_scan(w, u, k, v):
    """Eq. 9 as two running sums per channel: the linear-time form counted."""
    B, T, C = k.shape
    ek = k.exp()
    ekv = ek * v
    decay = torch.exp(-w)
    left, right = [], [None] * T
    a = b = torch.zeros(B, C, dtype=k.dtype)
    for t in range(T):
        left.append((a, b))
        a, b = a * decay + ekv[:, t], b * decay + ek[:, t]
    a = b = torch.zeros(B, C, dtype=k.dtype)
    for t in reversed(range(T)):
        right[t] = (a, b)
        a, b = a * decay + ekv[:, t], b * decay + ek[:, t]
    eu = u.exp()
    num = torch.stack([l[0] + r[0] for l, r in zip(left, right)], 1) + eu * ekv
    den = torch.stack([l[1] + r[1] for l, r in zip(left, right)], 1) + eu * ek
    return num / den


class CountMultiplies(TorchDispatchMode):
    """Elements produced by multiplications and divisions of two tensors."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket in (torch.ops.aten.mul, torch.ops.aten.div) and all(
                isinstance(a, torch.Tensor) and a.dim() for a in args[:2]):
            self.count += out.numel()
        return out


def test_wkv_formula_counts_the_linear_time_scan():
    B, T, C = 2, 7, 5
    w, u = torch.rand(C, dtype=torch.float64), torch.randn(C, dtype=torch.float64)
    k, v = torch.randn(B, T, C, dtype=torch.float64), torch.randn(B, T, C,
                                                                   dtype=torch.float64)
    torch.testing.assert_close(wkv_scan(w, u, k, v), naive_bi_wkv(w, u, k, v))
    with CountMultiplies() as counter:
        wkv_scan(w, u, k, v)
    assert counter.count == wkv_macs(B, T, C)
    # the O(N^2) sum of Eq. 9 as written would be T multiply-adds per token/channel
    assert torch_macs(naive_bi_wkv, w, u, k, v) == 0  # element-wise: torch sees none


def test_spatial_mix_counts_projections_and_formula_only():
    B, hw, C = 2, (5, 6), 12
    N = hw[0] * hw[1]
    layer = SpatialMix(C).eval()
    flops = count_flops(layer, torch.randn(B, N, C), hw)
    # four C x C projections + the WKV formula; nothing the scan runs leaks in
    assert flops.by_kind() == {'matmul': 4 * B * N * C * C, 'wkv': wkv_macs(B, N, C)}
    assert SpatialMix in FLOP_FORMULAS
    key_norm = count_flops(SpatialMix(C, key_norm=True).eval(),
                           torch.randn(B, N, C), hw)
    assert key_norm.by_kind()['norm'] == 5 * B * N * C


def test_effatt_counts_its_linear_form():
    B, h, N, d, dv = 2, 3, 50, 8, 6
    q, k, v = torch.randn(B, h, N, d), torch.randn(B, h, N, d), torch.randn(B, h, N, dv)
    expected = 2 * B * h * N * d * dv  # K^T V, then Q times the d x dv context
    assert ours(effatt, q, k, v) == torch_macs(effatt, q, k, v) == expected


@pytest.mark.parametrize('N', [49, 50, 130])
def test_block_attention_counts_each_block(N):
    B, h, d, dv, block = 2, 2, 8, 4, 49
    q, k, v = torch.randn(B, h, N, d), torch.randn(B, h, N, d), torch.randn(B, h, N, dv)

    def loop(q, k, v):  # brute force: one explicit attention per block
        return torch.cat([
            (q[:, :, s:s + block] @ k[:, :, s:s + block].transpose(-2, -1)).softmax(-1)
            @ v[:, :, s:s + block] for s in range(0, N, block)], dim=2)

    assert ours(block_attention, q, k, v, block) == torch_macs(loop, q, k, v)
    sizes = [min(block, N - s) for s in range(0, N, block)]
    assert torch_macs(loop, q, k, v) == B * h * sum(n * n for n in sizes) * (d + dv)


def test_infsa_counts():
    B, h, N, d = 2, 3, 40, 8
    q, k, v = torch.randn(B, h, N, d), torch.randn(B, h, N, d), torch.randn(B, h, N, d)
    # pure: Q K^T and R V, whatever the chunking, as the N x N reference
    assert ours(pure_infsa, q, k, v) == torch_macs(naive_pure_infsa, q, k, v)
    assert ours(pure_infsa, q, k, v) == 2 * B * h * N * N * d
    # linear: central query, scores and pooled context, each N d per head
    assert ours(linear_infsa, q, q, v) == 3 * B * h * N * d


def test_tome_matching_counts_the_similarity_matrix():
    B, hw, C = 2, (6, 8), 16
    metric = torch.randn(B, hw[0] * hw[1], C)
    dst = random_dst_mask(hw)
    n_dst = int(dst.sum())
    n_src = dst.numel() - n_dst
    macs = ours(lambda m: bipartite_soft_matching(m, dst, 10), metric)
    assert macs == torch_macs(bipartite_soft_matching, metric, dst, 10)
    assert macs == B * n_src * n_dst * C


class Scan(nn.Module):
    """A custom op with a child projection: the formula replaces its own ops only."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        return self.proj(x) @ x.transpose(-2, -1)


class ScanChild(Scan):
    pass


def test_registered_formula_replaces_own_ops_only():
    x = torch.randn(1, 5, 4)
    plain = count_flops(Scan(), x).by_kind()
    assert plain == {'matmul': 5 * 4 * 4 + 5 * 4 * 5}

    @register_flops(Scan)
    def scan(module, inputs, output):
        return {'scan': 7 * inputs[0].shape[1]}

    try:
        for cls in (Scan, ScanChild):  # subclasses inherit the formula
            assert count_flops(cls(), x).by_kind() == {'matmul': 80, 'scan': 35}
    finally:
        del FLOP_FORMULAS[Scan]


def test_stage_rows_add_up():
    model = SoLAVision(arch=dict(embed_dims=(16, 16, 32, 32), schedule='LL/LL/LLSLLS/LS',
                                 hsb_routes=(((1, 2), (3, 3)), )), head_dim=16).eval()
    complexity = Complexity(model, torch.randn(1, 3, 64, 64))
    rows = complexity.rows(model)
    assert [r[0] for r in rows] == ['stem', 'stage1', 'stage2', 'stage3', 'stage4']
    assert sum(r[1] for r in rows) == complexity.params() == sum(
        p.numel() for p in model.parameters())
    assert sum(sum(r[2].values()) for r in rows) == complexity.flops.total()
    assert rows[3][2]['attention'] > 0 and rows[1][2]['wkv'] > 0


def load_tool():
    spec = importlib.util.spec_from_file_location(
        'get_flops', REPO / 'tools' / 'analysis' / 'get_flops.py')
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def test_get_flops_tool_on_a_detector(capsys):
    """A whole Mask R-CNN (mmdet's tensor mode needs image metas) per part."""
    tool = load_tool()
    tool.main([str(REPO / 'configs/sola/mask-rcnn_sola-t_fpn_1x_coco.py'),
               '--shape', '64', '96', '--cfg-options',
               'model.test_cfg.rpn.max_per_img=8'])
    out = capsys.readouterr().out
    assert 'input 1x3x64x96' in out
    for row in ('backbone.stem', 'backbone.stage4', 'backbone', 'neck',
                'rpn_head', 'roi_head', 'total'):
        assert f'\n| {row} |' in out
    assert '| of which attention | of which wkv |' in out


def test_get_flops_tool_bare_backbone_and_paper_row(capsys):
    tool = load_tool()
    tool.main(['--arch', 'SoLAVision', 't', '--shape', '32'])
    out = capsys.readouterr().out
    assert "arch='t'" in out and '| stage3 |' in out and '| total |' in out
    entry = next(e for e in PAPER_FIGURES if e['model'] == 'SoLA-T')
    params, flops, no_sdpa = tool.paper_row(dict(entry, shape=(64, 64)))
    model = SoLAVision(arch='t', out_indices=(3, )).eval()  # as sola-t_in1k.py
    counted = count_flops(model, torch.randn(1, 3, 64, 64))
    assert params * 1e6 == sum(p.numel() for p in model.parameters())
    assert flops * 1e9 == counted.total()
    assert (flops - no_sdpa) * 1e9 == pytest.approx(counted.by_kind()['attention'])
