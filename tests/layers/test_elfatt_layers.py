"""ELFATT attention module, LOCAL window attentions and the attention-plan parser,
each against a naive token-by-token reference."""
import pytest
import torch
import torch.nn.functional as F

from mmhybrid.layers import parse_mixers
from mmhybrid.layers.mixers import (CrossShapedWindowAttention, ELFATTAttention,
                                    ShiftedWindowAttention, SoftmaxAttention,
                                    split_elfatt_heads)
from mmhybrid.models.backbones.hierarchical_attention import elfatt_plan
from mmhybrid.ops.elfatt import naive_block_attention, naive_effatt


# ----------------------------------------------------------------- plans
SWIN_LOCAL = ('shifted_window', ) * 4


def plan(attn, depths=(2, 2, 6, 2)):
    return parse_mixers(elfatt_plan(attn, SWIN_LOCAL, depths), list(depths),
                        'SwinELFATT')


def test_presets_and_compact_plans():
    assert plan('elfatt') == [
        ['elfatt'] * 2, ['elfatt'] * 2, ['softmax', 'elfatt'] * 3, ['softmax'] * 2]
    assert plan('local') == [['shifted_window'] * d for d in (2, 2, 6, 2)]
    assert plan('effatt')[2] == ['softmax', 'effatt'] * 3
    assert plan('E, G, GE ,L') == plan(['elfatt', 'global', ['global', 'elfatt'],
                                        'local'])
    # Table 6 rows: ELFATT in levels 1 / 1-2 / 1-3 / all.
    assert plan('E,G,G,G')[1] == ['softmax'] * 2
    assert plan('E,E,E,E')[3] == ['elfatt'] * 2
    # the same plans in the one grammar
    assert plan('elfatt') == parse_mixers('E/E/SE/S', [2, 2, 6, 2], 'SwinELFATT')
    # a pattern is cut where a stage ends (the old plans' rule)
    assert plan('elfatt', (1, 1, 1, 1))[2] == ['softmax']


@pytest.mark.parametrize('attn', ['E,E,GE', 'E,E,GX,G', ['elfatt', 'bogus', 'G', 'G'],
                                  'nonsense'])
def test_bad_plans_raise(attn):
    with pytest.raises(ValueError, match='unknown attention plan'):
        plan(attn, [1, 1, 2, 1])


def test_head_split_follows_eq8_and_eq9():
    assert split_elfatt_heads(128, 4, 0.5) == ((2, 32), (2, 32))   # Eq. 9
    assert split_elfatt_heads(96, 3, 0.5) == ((3, 16), (3, 16))    # Eq. 8
    assert split_elfatt_heads(64, 2, 0.25) == ((2, 8), (2, 24))    # Table 7
    assert split_elfatt_heads(128, 4, 0.75) == ((3, 32), (1, 32))
    assert split_elfatt_heads(64, 2, 1.0) == ((2, 32), (0, 0))     # EFFATT
    assert split_elfatt_heads(64, 2, 0.0) == ((0, 0), (2, 32))     # blockify only
    with pytest.raises(ValueError):
        split_elfatt_heads(64, 2, 1.5)


# ------------------------------------------------------------- ELFATT module
def _lepe(attn, v, hw):
    B, N, C = v.shape
    img = v.transpose(1, 2).reshape(B, C, *hw)
    return F.conv2d(img, attn.lepe.weight, attn.lepe.bias, padding=1,
                    groups=C).flatten(2).transpose(1, 2)


def _heads(t, n):
    return t.view(t.shape[0], t.shape[1], n, -1).transpose(1, 2)


def _unheads(t):
    return t.transpose(1, 2).flatten(2)


@pytest.mark.parametrize('dims,heads,ratio,block', [(32, 4, 0.5, 8), (24, 3, 0.5, 5),
                                                    (32, 2, 0.25, 16)])
def test_elfatt_1d_layout_matches_eq11(dims, heads, ratio, block):
    attn = ELFATTAttention(dims, heads, block_size=block, global_ratio=ratio,
                           block_layout='1d').double()
    hw = (5, 7)
    x = torch.randn(2, 35, dims, dtype=torch.float64)
    q, k, v = attn.qkv(x).chunk(3, dim=-1)
    (hg, dg), (hl, dl) = split_elfatt_heads(dims, heads, ratio)
    c1 = hg * dg
    glob = naive_effatt(*(_heads(t[..., :c1], hg) for t in (q, k, v)))
    loc = naive_block_attention(*(_heads(t[..., c1:], hl) for t in (q, k, v)), block)
    expected = torch.cat([_unheads(glob), _unheads(loc)], -1) + _lepe(attn, v, hw)
    torch.testing.assert_close(attn(x, hw)[0], attn.proj(expected))


@pytest.mark.parametrize('dims,heads,ratio,block,hw', [
    (32, 4, 0.5, 9, (7, 8)),      # Eq. 9 split, ragged right and bottom windows
    (24, 3, 0.5, 4, (5, 6)),      # Eq. 8 split (heads cut by channels)
    (32, 2, 0.25, 16, (3, 10)),   # Table 7 ratio; windows taller than the map
    (16, 2, 0.0, 9, (6, 6)),      # blockify only
    (16, 2, 0.5, 8, (5, 9)),      # non-square block: 2x4 windows
])
def test_elfatt_2d_layout_matches_window_loop(dims, heads, ratio, block, hw):
    """Eq. 10 with square windows: exact softmax and LePE inside each window for
    the local channels, EFFATT and LePE on the whole image for the global ones."""
    attn = ELFATTAttention(dims, heads, block_size=block, global_ratio=ratio).double()
    wh, ww = attn.window
    assert attn.block_layout == '2d' and wh * ww == block and wh <= ww
    H, W = hw
    x = torch.randn(2, H * W, dims, dtype=torch.float64)
    q, k, v = attn.qkv(x).chunk(3, dim=-1)
    (hg, dg), (hl, dl) = split_elfatt_heads(dims, heads, ratio)
    c1 = hg * dg
    out = torch.zeros(2, dims, H, W, dtype=torch.float64)
    if c1:
        glob = _unheads(naive_effatt(*(_heads(t[..., :c1], hg) for t in (q, k, v))))
        out[:, :c1] = (glob + _lepe(attn, v, hw)[..., :c1]).transpose(1, 2).reshape(
            2, c1, H, W)
    img = [t[..., c1:].transpose(1, 2).reshape(2, dims - c1, H, W) for t in (q, k, v)]
    for r in range(0, H, wh):
        for c in range(0, W, ww):
            qs, ks, vs = (t[:, :, r:r + wh, c:c + ww] for t in img)
            h_, w_ = vs.shape[2:]
            tokens = [_heads(t.flatten(2).transpose(1, 2), hl) for t in (qs, ks, vs)]
            o = _unheads(_naive_softmax(*tokens)).transpose(1, 2).reshape(2, -1, h_, w_)
            o = o + F.conv2d(vs, attn.lepe.weight[c1:], attn.lepe.bias[c1:], padding=1,
                             groups=dims - c1)
            out[:, c1:, r:r + wh, c:c + ww] = o
    expected = attn.proj(out.flatten(2).transpose(1, 2))
    torch.testing.assert_close(attn(x, hw)[0], expected)


def test_block_windows_and_errors():
    windows = {bs: ELFATTAttention(16, 2, block_size=bs).window
               for bs in (49, 196, 4, 8, 12, 7)}
    assert windows == {49: (7, 7), 196: (14, 14), 4: (2, 2), 8: (2, 4), 12: (3, 4),
                       7: (1, 7)}
    with pytest.raises(ValueError, match='block_layout'):
        ELFATTAttention(16, 2, block_layout='3d')
    with pytest.raises(ValueError, match='block_size'):
        ELFATTAttention(16, 2, block_size=0)


def test_elfatt_extremes_are_effatt_and_global():
    x = torch.randn(2, 30, 16, dtype=torch.float64)
    hw = (5, 6)
    vanilla = SoftmaxAttention(16, 2, lepe=True).double()
    for layout in ('1d', '2d'):
        full_block = ELFATTAttention(16, 2, block_size=64, global_ratio=0.,
                                     block_layout=layout).double()
        full_block.load_state_dict(vanilla.state_dict())
        torch.testing.assert_close(full_block(x, hw)[0], vanilla(x, hw)[0])
    eff = ELFATTAttention(16, 2, global_ratio=1.).double()
    q, k, v = eff.qkv(x).chunk(3, dim=-1)
    expected = _unheads(naive_effatt(*(_heads(t, 2) for t in (q, k, v))))
    torch.testing.assert_close(eff(x, hw)[0], eff.proj(expected + _lepe(eff, v, hw)))


def test_lepe_switch_removes_conv():
    attn = ELFATTAttention(16, 2, lepe=False)
    assert attn.lepe is None and 'lepe' not in dict(attn.named_parameters())
    assert attn(torch.randn(1, 12, 16), (3, 4))[0].shape == (1, 12, 16)


# ------------------------------------------------------- LOCAL attentions
def _naive_softmax(q, k, v, bias=None):
    logits = q @ k.transpose(-2, -1) * q.shape[-1]**-0.5
    if bias is not None:
        logits = logits + bias
    return logits.softmax(-1) @ v


@pytest.mark.parametrize('hw,shift', [((8, 8), False), ((8, 8), True), ((6, 9), False),
                                      ((6, 9), True), ((3, 2), True)])
def test_shifted_window_attention_matches_token_loop(hw, shift):
    ws, heads, C = 4, 2, 8
    attn = ShiftedWindowAttention(C, heads, window_size=ws, shift=shift).double()
    with torch.no_grad():
        attn.relative_position_bias_table.normal_()
    H, W = hw
    x = torch.randn(1, H * W, C, dtype=torch.float64)
    q, k, v = (_heads(t, heads)[0] for t in attn.qkv(x).chunk(3, dim=-1))
    fits = H <= ws and W <= ws
    s = ws // 2 if shift and not fits else 0
    Hp, Wp = -(-H // ws) * ws, -(-W // ws) * ws
    table = attn.relative_position_bias_table
    out = torch.zeros(heads, H * W, C // heads, dtype=torch.float64)
    for qi in range(H * W):
        r, c = divmod(qi, W)
        rr, cr = (r - s) % Hp, (c - s) % Wp  # position in the rolled frame
        keys, bias = [], []
        for ki in range(H * W):
            r2, c2 = divmod(ki, W)
            rr2, cr2 = (r2 - s) % Hp, (c2 - s) % Wp
            same_window = rr // ws == rr2 // ws and cr // ws == cr2 // ws
            # after the cyclic shift only tokens that were neighbours may meet
            same_side = ((rr >= Hp - s) == (rr2 >= Hp - s)
                         and (cr >= Wp - s) == (cr2 >= Wp - s)) if s else True
            if same_window and same_side:
                keys.append(ki)
                dr, dc = rr % ws - rr2 % ws, cr % ws - cr2 % ws
                bias.append(table[(dr + ws - 1) * (2 * ws - 1) + dc + ws - 1])
        bias = torch.stack(bias, -1)[:, None, :]  # (heads, 1, keys)
        out[:, qi] = _naive_softmax(q[:, qi:qi + 1], k[:, keys], v[:, keys], bias)[:, 0]
    expected = attn.proj(_unheads(out[None]))
    torch.testing.assert_close(attn(x, hw)[0], expected)


@pytest.mark.parametrize('hw,split', [((6, 6), 2), ((5, 7), 2), ((4, 6), 1)])
def test_cross_shaped_attention_matches_stripe_loop(hw, split):
    heads, C = 4, 16
    attn = CrossShapedWindowAttention(C, heads, split_size=split).double()
    H, W = hw
    x = torch.randn(1, H * W, C, dtype=torch.float64)
    q, k, v = attn.qkv(x).chunk(3, dim=-1)
    img = [t[0].T.reshape(C, H, W) for t in (q, k, v)]
    out = torch.zeros(C, H, W, dtype=torch.float64)
    half = C // 2
    for branch in range(2):
        ch = slice(branch * half, (branch + 1) * half)
        for start in range(0, W if branch == 0 else H, split):
            area = ((slice(None), slice(start, start + split)) if branch == 0 else
                    (slice(start, start + split), slice(None)))
            qs, ks, vs = (t[ch][(slice(None), ) + area] for t in img)
            h, w = vs.shape[1:]
            tokens = [t.reshape(heads // 2, -1, h * w).transpose(1, 2)
                      for t in (qs, ks, vs)]
            o = _naive_softmax(*tokens).transpose(1, 2).reshape(half, h, w)
            o = o + F.conv2d(vs[None], attn.lepe.weight[ch], attn.lepe.bias[ch],
                             padding=1, groups=half)[0]
            out[(ch, ) + area] = o
    expected = attn.proj(out.reshape(C, -1).T[None])
    torch.testing.assert_close(attn(x, hw)[0], expected)
