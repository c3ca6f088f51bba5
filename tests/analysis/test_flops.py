"""FLOP counting (tools/analysis/flops, get_flops.py) against brute force.

Each op's count is checked against an independent count: torch's own
``FlopCounterMode`` (2 per multiply-add, no attention kernels on the CPU) on the
same code or on a plain reference, or the multiplications of an explicit loop.
"""
import functools
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

import mmhybrid.layers.mixers.gated_deltanet as gated_deltanet_module
from mmhybrid.layers import HistoricalAttention, build_mixer, registered_mixers
from mmhybrid.layers.mixers import (BidirectionalGatedDeltaNet, SlidingWindowAttention,
                                    SpatialMix)
from mmhybrid.models.backbones import HAViT, SoLAVision
from mmhybrid.ops import (bipartite_soft_matching, block_attention, effatt,
                          gated_delta_rule, linear_infsa, pure_infsa,
                          sliding_window_attention)
from mmhybrid.ops.delta_rule import naive_gated_delta_rule
from mmhybrid.ops.elfatt import window_block_attention
from mmhybrid.ops.historical_attention import naive_historical_attention
from mmhybrid.ops.infsa import naive_pure_infsa
from mmhybrid.ops.tome import random_dst_mask
from mmhybrid.ops.wkv import naive_bi_wkv
from tools.analysis import get_flops
from mmhybrid.ops import (delta_rule_macs, historical_attention_macs,
                          sliding_window_macs, wkv_macs)
from tools.analysis.flops import Complexity, count_flops

REPO = Path(__file__).resolve().parents[2]


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
    """Elements produced by multiplications and divisions (or ``ops``) of two
    tensors (not of a tensor and a scalar)."""

    def __init__(self, ops=(torch.ops.aten.mul, torch.ops.aten.div)):
        super().__init__()
        self.ops = ops
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket in self.ops and all(
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


def test_delta_rule_formula_counts_the_naive_recurrence():
    B, T, H, K, V = 2, 7, 3, 5, 4
    q, k = torch.randn(B, T, H, K, dtype=torch.float64), torch.randn(
        B, T, H, K, dtype=torch.float64)
    v = torch.randn(B, T, H, V, dtype=torch.float64)
    g = -torch.rand(B, T, H, dtype=torch.float64)
    beta = torch.rand(B, T, H, dtype=torch.float64)
    with CountMultiplies() as counter:  # decay, read, beta k, write, output
        naive_gated_delta_rule(q, k, v, g, beta)
    assert counter.count == delta_rule_macs(B, T, H, K, V) == B * T * H * (4 * K * V + K)


@pytest.mark.parametrize('backend', ['chunk', 'naive'])
def test_gated_deltanet_counts_projections_conv_and_formula(backend, monkeypatch):
    B, hw, C, heads, Cv = 2, (5, 7), 12, 3, 24
    N = hw[0] * hw[1]
    monkeypatch.setattr(gated_deltanet_module, 'gated_delta_rule',
                        functools.partial(gated_delta_rule, backend=backend))
    layer = BidirectionalGatedDeltaNet(C, heads, expand_v=Cv / C).eval()
    flops = count_flops(layer, torch.randn(B, N, C), hw)
    # q k v, a, b, gate and output projections; the 3x3 depth-wise conv; both scans
    # (2B sequences) by the formula whatever the backend: the chunk matmuls and
    # the solve of the CPU algorithm do not leak in
    projections = C * (2 * C + Cv) + 2 * C * heads + C * Cv + Cv * C
    assert flops.by_kind() == {
        'matmul': B * N * projections, 'conv': B * N * (2 * C + Cv) * 9,
        'delta_rule': delta_rule_macs(2 * B, N, heads, C // heads, Cv // heads)}


def window_starts(size, window):
    """First index of each query's window along an axis: centred, shifted
    inwards at the borders (the definition, written independently of the op)."""
    window = min(window, size)
    return [min(max(i - window // 2, 0), size - window) for i in range(size)], window


def per_query_window_attention(q, k, v, hw_shape, window_size):
    """Brute force: each query attends explicitly to its own window's keys."""
    (H, W), (wh, ww) = hw_shape, window_size
    (rows, wh), (cols, ww) = window_starts(H, wh), window_starts(W, ww)
    out = []
    for r in range(H):
        for c in range(W):
            keys = [(rows[r] + i) * W + cols[c] + j for i in range(wh) for j in range(ww)]
            query = q[:, :, r * W + c:r * W + c + 1]
            logits = query @ k[:, :, keys].transpose(-2, -1) * q.shape[-1]**-0.5
            out.append(logits.softmax(-1) @ v[:, :, keys])
    return torch.cat(out, dim=2)


@pytest.mark.parametrize('hw,window', [((9, 10), (7, 7)), ((4, 9), (3, 5)),
                                       ((3, 4), (7, 7)), ((16, 16), (7, 7))])
def test_sliding_window_counts_each_querys_window(hw, window):
    B, heads, d = 2, 2, 4
    N = hw[0] * hw[1]
    q, k, v = (torch.randn(B, heads, N, d, dtype=torch.float64) for _ in range(3))
    torch.testing.assert_close(per_query_window_attention(q, k, v, hw, window),
                               sliding_window_attention(q, k, v, hw, window))
    brute = torch_macs(per_query_window_attention, q, k, v, hw, window)
    assert brute == sliding_window_macs(B, heads, hw, window, d, d)
    layer = SlidingWindowAttention(heads * d, heads, window).eval()
    flops = count_flops(layer, torch.randn(B, N, heads * d), hw).by_kind()
    C = heads * d
    assert flops == {'matmul': B * N * (3 * C * C + C * C), 'attention': brute}


@pytest.mark.parametrize('case', ['batch', 'shared', 'random_h0', 'zero_h0',
                                  'keyword', 'alpha_1'])
def test_historical_attention_counts_logits_mix_and_values(case):
    B, heads, N, d, dv = 2, 3, 13, 8, 6
    q, k = torch.randn(B, heads, N, d), torch.randn(B, heads, N, d)
    v = torch.randn(B, heads, N, dv)
    module = HistoricalAttention(heads, alpha=1. if case == 'alpha_1' else 0.45,
                                 init='zero' if case == 'zero_h0' else 'random').eval()
    history = {'batch': torch.randn(B, heads, N, N), 'keyword': torch.randn(
        B, heads, N, N), 'shared': torch.randn(1, heads, N, N)}.get(case)
    counted = count_flops(module, q, k, v, history=history) if case == 'keyword' else \
        count_flops(module, q, k, v, history)
    # brute force on the N x N reference with the history the layer mixes in
    effective = history if history is not None else module.initial_history(
        B, N, q.device)
    with CountMultiplies((torch.ops.aten.add, )) as adds:
        naive_historical_attention(q, k, v, effective, alpha=module.alpha)
    mixes = 0 if case == 'alpha_1' else adds.count  # the blocked op skips H at 1
    expected = {'attention': torch_macs(naive_historical_attention, q, k, v, effective)}
    if mixes:
        expected['history'] = mixes
    assert counted.by_kind() == expected
    assert expected == historical_attention_macs(B, heads, N, d, dv, mixes > 0)
    assert (mixes == 0) == (case in ('zero_h0', 'alpha_1'))


@pytest.mark.parametrize('hw,window', [((14, 14), (7, 7)), ((9, 11), (3, 4)),
                                       ((10, 12), (7, 7)), ((5, 6), (2, 4))])
def test_elfatt_2d_windows_count_block_attention_per_window(hw, window):
    B, heads, d, dv = 2, 2, 8, 4
    H, W = hw
    q, k = torch.randn(B, heads, H * W, d), torch.randn(B, heads, H * W, d)
    v = torch.randn(B, heads, H * W, dv)
    windows = [[r * W + c for r in range(r0, min(r0 + window[0], H))
                for c in range(c0, min(c0 + window[1], W))]
               for r0 in range(0, H, window[0]) for c0 in range(0, W, window[1])]

    def loop(q, k, v):  # brute force: one explicit attention per window
        out = torch.empty(B, heads, H * W, dv)
        for idx in windows:
            logits = q[:, :, idx] @ k[:, :, idx].transpose(-2, -1) * d**-0.5
            out[:, :, idx] = logits.softmax(-1) @ v[:, :, idx]
        return out

    torch.testing.assert_close(loop(q, k, v),
                               window_block_attention(q, k, v, hw, window))
    assert ours(window_block_attention, q, k, v, hw, window) == torch_macs(
        loop, q, k, v)
    assert torch_macs(loop, q, k, v) == B * heads * sum(
        len(idx)**2 for idx in windows) * (d + dv)


class Scan(nn.Module):
    """A custom op with a child projection: the formula replaces its own ops only."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        return self.proj(x) @ x.transpose(-2, -1)


class FormulaScan(Scan):
    def macs(self, x):
        return {'scan': 7 * x.shape[1]}


class FormulaScanChild(FormulaScan):
    pass


def test_macs_method_replaces_own_ops_only():
    x = torch.randn(1, 5, 4)
    plain = count_flops(Scan(), x).by_kind()
    assert plain == {'matmul': 5 * 4 * 4 + 5 * 4 * 5}
    for cls in (FormulaScan, FormulaScanChild):  # subclasses inherit the formula
        assert count_flops(cls(), x).by_kind() == {'matmul': 80, 'scan': 35}


def test_stage_rows_add_up():
    model = SoLAVision(arch=dict(embed_dims=(16, 16, 32, 32), schedule='LL/LL/LLSLLS/LS',
                                 hsb_routes=(((1, 2), (3, 3)), )), head_dim=16).eval()
    complexity = Complexity(model, torch.randn(1, 3, 64, 64))
    rows = complexity.rows(model)
    assert [r[0] for r in rows] == ['stem', 'stage1', 'stage2', 'stage3', 'stage4',
                                    'other']
    # left out of the stages: the position embedding resampled from 56^2 to 16^2 by
    # two matrices, (16 x 56) @ (56 x 56 C) and (16 x 56) @ (16 x 56 x C), C = 16
    assert rows[-1][1:] == (0, {'matmul': 16 * 56 * 56 * 16 + 16 * 56 * 16 * 16})
    assert sum(r[1] for r in rows) == complexity.params() == sum(
        p.numel() for p in model.parameters())
    assert sum(sum(r[2].values()) for r in rows) == complexity.flops.total()
    assert rows[3][2]['attention'] > 0 and rows[1][2]['wkv'] > 0


# the rows of configs/<family>/metafile.yml, as get_flops.py reads them
_, PAPER_FIGURES, ARCH_FIGURES = get_flops.read_metafiles()


def test_metafiles_name_existing_configs_and_every_family():
    assert {e['paper'] for e in PAPER_FIGURES} == {'sola', 'elfatt', 'infvit'}
    assert {e['type'] for e in ARCH_FIGURES} == {
        'SoLAVision', 'InfiniteVLVision', 'HAViT', 'SwinELFATT', 'CSWin', 'InfViT'}
    for entry in PAPER_FIGURES:
        assert (REPO / entry['config']).is_file(), entry['config']
        assert entry['params'] > 0 and entry['part'] in ('backbone', 'model')


def test_get_flops_tool_on_a_detector(capsys):
    """A whole Mask R-CNN (mmdet's tensor mode needs image metas) per part."""
    get_flops.main([str(REPO / 'configs/sola/mask-rcnn_sola-t_fpn_1x_coco.py'),
                   '--shape', '64', '96', '--cfg-options',
                   'model.test_cfg.rpn.max_per_img=8'])
    out = capsys.readouterr().out
    assert 'input 1x3x64x96' in out
    for row in ('backbone.stem', 'backbone.stage4', 'backbone', 'neck',
                'rpn_head', 'roi_head', 'total'):
        assert f'\n| {row} |' in out
    assert '| of which attention | of which wkv |' in out


def test_get_flops_tool_bare_backbone_and_paper_row(capsys):
    get_flops.main(['--arch', 'SoLAVision', 't', '--shape', '32'])
    out = capsys.readouterr().out
    assert "arch='t'" in out and '| stage3 |' in out and '| total |' in out
    entry = next(e for e in PAPER_FIGURES if e['model'] == 'SoLA-T')
    params, flops, no_sdpa = get_flops.paper_row(dict(entry, shape=(64, 64)))
    model = SoLAVision(arch='t', out_indices=(3, )).eval()  # as sola-t_in1k.py
    counted = count_flops(model, torch.randn(1, 3, 64, 64))
    assert params * 1e6 == sum(p.numel() for p in model.parameters())
    assert flops * 1e9 == counted.total()
    assert (flops - no_sdpa) * 1e9 == pytest.approx(counted.by_kind()['attention'])


def test_get_flops_tool_arch_options_and_arch_table(capsys, monkeypatch):
    """--arch passes --cfg-options to the backbone; --arch-tables counts the
    ARCH_FIGURES entries (here the HAViT paper model, 32^2 with patch 4)."""
    entry = next(e for e in ARCH_FIGURES if e['model'].startswith('HAViT (paper'))
    model = HAViT(arch='paper', img_size=32, patch_size=4).eval()
    params = sum(p.numel() for p in model.parameters())
    counted = count_flops(model, torch.randn(1, 3, 32, 32))
    get_flops.main(['--arch', 'HAViT', 'paper', '--shape', '32', '--cfg-options',
                   'patch_size=4', 'img_size=32'])
    out = capsys.readouterr().out
    assert f'| total | {params / 1e6:.3f} | {counted.total() / 1e9:.3f} |' in out
    monkeypatch.setattr(get_flops, 'ARCH_FIGURES', [entry])
    get_flops.main(['--arch-tables'])
    out = capsys.readouterr().out.splitlines()
    kinds = counted.by_kind()
    assert out[0] == ('| model | backbone | input | params (M) | GFLOPs | of which '
                      'attention | of which history |')
    assert out[2] == (
        "| HAViT (paper, CIFAR) | `HAViT(arch='paper', img_size=32, patch_size=4)` | "
        f"32x32 | {params / 1e6:.2f} | {counted.total() / 1e9:.3f} | "
        f"{kinds['attention'] / 1e9:.3f} | {kinds['history'] / 1e9:.3f} |")


# ELFATT Table 1 (classifiers at 224^2): its parameter counts are checked by
# tests/models/test_elfatt_backbones.py; here its FLOPs, with all SDPA attention (nFA) and
# without it (FA, what its counter sees when FlashAttention runs), as get_flops.py
# prints them. The tolerance is 5%; the B models are slow.
ELFATT_TABLE1 = [
    pytest.param(e, id=e['model'], marks=[] if '-T-' in e['model'] else pytest.mark.slow)
    for e in PAPER_FIGURES if e['paper'] == 'elfatt']


@pytest.mark.parametrize('entry', ELFATT_TABLE1)
def test_flops_next_to_elfatt_table1(entry):
    params, flops, no_sdpa = get_flops.paper_row(entry)
    paper, paper_fa = entry['flops'], entry['flops_fa']
    print(f"{entry['model']}: {params:.2f}M, {flops:.3f} GFLOPs (Table 1: "
          f"{paper}G, {100 * (flops / paper - 1):+.1f}%), without SDPA {no_sdpa:.3f}"
          + (f' (FA: {paper_fa}G, {100 * (no_sdpa / paper_fa - 1):+.1f}%)'
             if paper_fa else ''))
    assert abs(flops / paper - 1) < 0.05
    if paper_fa:
        assert abs(no_sdpa / paper_fa - 1) < 0.05


@pytest.mark.parametrize('name', sorted(registered_mixers()))
def test_every_registered_mixer_is_counted(name):
    """The counter sees every mixer's work: its projections as they run and, for
    a mixer with ``macs``, its formula (nothing of the scan leaks in)."""
    cls = registered_mixers()[name]
    mixer = build_mixer(name, 16, 2, options=getattr(cls, 'test_options', {})).eval()
    hw = (6, 10)
    flops = count_flops(mixer, torch.randn(2, 60, 16), hw)
    kinds = flops.by_kind()
    assert sum(kinds.values()) > 0
    if hasattr(mixer, 'macs'):
        assert set(mixer.macs(torch.randn(2, 60, 16), hw)) <= set(kinds)
