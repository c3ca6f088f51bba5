"""The mixer registry and the one layout grammar: every registered mixer in every
backbone, paper spellings, a layout read back and rebuilt, clear refusals."""
import pytest
import torch

from mmhybrid.layers import mixer_letters, parse_mixers, registered_mixers
from mmhybrid.layers.mixers import (BidirectionalGatedDeltaNet, SoftmaxAttention,
                                    SpatialMix, mixer_options)
from mmhybrid.models.backbones import InfViT, SoLAVision, SwinELFATT
from mmhybrid.registry import MIXERS
from tools.tiny_backbones import build_tiny

SHIPPED = {
    'softmax': 'S', 'wkv': 'L', 'gated_deltanet': 'G', 'sliding_window': 'W',
    'shifted_window': 'H', 'cross_shaped_window': 'X', 'elfatt': 'E',
    'effatt': 'F', 'pure_infsa': 'P', 'linear_infsa': 'I'}
BACKBONES = ('SoLAVision', 'InfiniteVLVision', 'SwinELFATT', 'CSWin', 'InfViT',
             'HAViT')


def test_one_letter_table_covers_every_shipped_mixer():
    letters = mixer_letters()
    assert {name: letters_ for letters_, name in letters.items()
            if name in SHIPPED} == {n: letter for n, letter in SHIPPED.items()}
    assert len(set(letters)) == len(letters)  # no letter names two mixers


def test_letters_names_and_patterns():
    assert parse_mixers('LL/LL/LLSLLS/LS', 4, 'SoLA') == [
        ['wkv'] * 2, ['wkv'] * 2, ['wkv', 'wkv', 'softmax'] * 2, ['wkv', 'softmax']]
    # a shorter entry repeats where the arch fixes depths; one name for a stage
    assert parse_mixers(['E', 'elfatt', 'SE', ['softmax', 'wkv']], [2, 1, 4, 2],
                        'Swin') == [['elfatt'] * 2, ['elfatt'], ['softmax', 'elfatt'] * 2,
                                    ['softmax', 'wkv']]
    assert parse_mixers('gated_deltanet', [1, 2], 'x') == [['gated_deltanet'],
                                                           ['gated_deltanet'] * 2]
    assert parse_mixers(['softmax', 'linear_infsa'], [4], 'ViT') == [
        ['softmax', 'linear_infsa'] * 2]


@pytest.mark.parametrize('layout,match', [
    ('LQ/L', "unknown mixer 'Q' in stage 1"),
    ('L/sofmax', "unknown mixer 'sofmax' in stage 2"),
    ('L/L/L', 'has 3 stages, the backbone has 2'),
    ('E,E', "uses ',' between stages, ELFATT's attn= spelling"),
])
def test_bad_layouts_are_one_clear_error(layout, match):
    with pytest.raises((KeyError, ValueError), match=match) as info:
        parse_mixers(layout, 2, 'SoLAVision')
    if 'unknown' in match:  # the message lists what is registered
        assert all(repr(name) in str(info.value) for name in SHIPPED)


def test_paper_spellings_map_into_the_grammar():
    sola = SoLAVision(arch=dict(embed_dims=(16, 16, 32, 32), schedule='LL/L/LS/S'),
                      head_dim=16)
    assert sola.mixers == parse_mixers('LL/L/LS/S', 4, 'x')
    swin = build_tiny('SwinELFATT', attn='E,E,GE,L')
    assert swin.mixers == [['elfatt'] * 2, ['elfatt'] * 2, ['softmax', 'elfatt'],
                           ['shifted_window'] * 2]
    cswin = build_tiny('CSWin', attn='local')
    assert cswin.mixers[0] == ['cross_shaped_window'] and cswin.mixers[3] == ['softmax']
    vit = build_tiny('InfViT', attn_types='PLSL')
    assert vit.mixers == [['pure_infsa', 'linear_infsa', 'softmax', 'linear_infsa']]


def test_default_layout_reads_back_and_rebuilds():
    model = SoLAVision(arch='t')
    layout = model.mixers
    assert layout[2] == ['wkv', 'wkv', 'softmax'] * 2
    layout[2][2] = 'gated_deltanet'
    changed = SoLAVision(arch='t', mixers=layout, with_hsb=False)
    assert isinstance(changed.stages[2][2].attn, BidirectionalGatedDeltaNet)
    assert isinstance(changed.stages[2][5].attn, SoftmaxAttention)
    assert isinstance(changed.stages[0][0].attn, SpatialMix)


def test_mixer_cfg_takes_names_or_letters_and_refuses_foreign_options():
    model = build_tiny('InfiniteVLVision', mixer_cfg=dict(G=dict(expand_v=2)))
    assert model.stages[0][1].attn.hidden_dims == 2 * 16
    with pytest.raises(ValueError, match=r"mixer_cfg\['softmax'\] has \['expand_v'\]"):
        build_tiny('SoLAVision', mixer_cfg=dict(softmax=dict(expand_v=2)))
    with pytest.raises(KeyError, match="unknown mixer 'Q'"):
        build_tiny('SoLAVision', mixer_cfg=dict(Q=dict()))


def _matrix_kwargs(backbone, name):
    kwargs = dict(mixers=name, mixer_cfg={name: MIXERS.get(name).test_options}
                  if getattr(MIXERS.get(name), 'test_options', None) else None)
    if backbone in ('SoLAVision', 'InfiniteVLVision'):
        kwargs.update(head_dim=8, hsb_routes=())  # 2+ heads: cross-shaped halves
    if backbone == 'HAViT':
        kwargs.update(history=None)  # no softmax layer to carry a history
    return kwargs


@pytest.mark.parametrize('name', sorted(SHIPPED))
@pytest.mark.parametrize('backbone', BACKBONES)
def test_every_mixer_stands_in_every_backbone(backbone, name):
    reference = build_tiny(backbone)
    model = build_tiny(backbone, **_matrix_kwargs(backbone, name))
    assert {n for stage in model.mixers for n in stage} == {name}
    x = torch.randn(2, 3, 48, 80)
    with torch.no_grad():
        expected = [o.shape for o in reference(x)]
    outs = model(x)
    assert [o.shape for o in outs] == expected
    sum(o.square().mean() for o in outs).backward()
    mixer = next(b.attn for b in model.modules() if hasattr(b, 'attn')
                 and isinstance(b.attn, MIXERS.get(name)))
    assert all(p.grad is not None and p.grad.abs().sum() > 0
               for p in mixer.parameters() if p.requires_grad)


def test_geometry_refusals_say_why():
    with pytest.raises(ValueError, match='even number of heads'):
        build_tiny('SoLAVision', mixers='X/X/X/X', hsb_routes=())  # 1-head stages
    with pytest.raises(ValueError, match='window_size must be an odd int'):
        build_tiny('SwinELFATT', mixers='W/W/W/W')  # Swin's window 4
    with pytest.raises(ValueError, match="HSB source .* carries a hidden state"):
        build_tiny('SoLAVision', mixers='SS/L/LLSLLS/LS')


def test_constructor_options_are_read_from_signatures():
    assert {'window_size', 'shift', 'qkv_bias'} <= mixer_options(MIXERS.get(
        'shifted_window'))
    assert 'lepe' not in mixer_options(MIXERS.get('shifted_window'))
    assert 'global_ratio' not in mixer_options(MIXERS.get('effatt'))
    assert {'qk_scale', 'lepe', 'block_size'} <= mixer_options(MIXERS.get('elfatt'))
    assert set(registered_mixers()) >= set(SHIPPED)
