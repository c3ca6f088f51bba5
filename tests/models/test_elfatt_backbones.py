"""SwinELFATT and CSWin: attention plans, Table 1 parameter counts, standard
OpenMMLab backbone behaviour, downstream registries."""
import importlib

import pytest
import torch
from mmengine.registry import DefaultScope

import mmhybrid  # noqa: F401
from mmhybrid.layers import ConvMerging, PatchMerging
from mmhybrid.layers.mixers import (CrossShapedWindowAttention, EFFATTAttention,
                                    ELFATTAttention, ShiftedWindowAttention,
                                    SoftmaxAttention)
from mmhybrid.models.backbones import CSWin, SwinELFATT
from mmhybrid.utils import register_scope

from tests._downstream import downstream_model_cfg
from tools.tiny_backbones import ARCHS

TINY = {SwinELFATT: ARCHS['SwinELFATT'], CSWin: ARCHS['CSWin']}
TINY_BLOCKS = (4, 4, 16, 4)  # 2x2, 2x2, 4x4, 2x2 windows
BACKBONES = [SwinELFATT, CSWin]


def tiny(cls, **kwargs):
    kwargs.setdefault('block_sizes', TINY_BLOCKS)
    if cls is SwinELFATT:
        kwargs.setdefault('window_size', 4)
    model = cls(arch=TINY[cls], **kwargs)
    model.init_weights()
    return model


def count(module):
    return sum(p.numel() for p in module.parameters())


def attn_types(model):
    return [[type(b.attn) for b in stage.blocks] for stage in model.stages]


# ----------------------------------------------------------- plans / archs
def test_default_plan_is_the_papers():
    E, G = ELFATTAttention, SoftmaxAttention
    swin = SwinELFATT(arch='t')
    assert attn_types(swin) == [[E] * 2, [E] * 2, [G, E] * 3, [G] * 2]
    assert [s.blocks[-1].attn.window for s in swin.stages[:3]] == [(14, 14)] * 3
    cswin = CSWin(arch='t')
    assert attn_types(cswin) == [[E] * 2, [E] * 4, [G, E] * 9, [G]]
    assert [s.blocks[-1].attn.block_size for s in cswin.stages[:3]] == [49, 49, 196]
    cswin_b = CSWin(arch='b', depths=(1, 1, 1, 1), attn='E,E,E,G')
    assert [s.blocks[-1].attn.block_size for s in cswin_b.stages[:3]] == [196] * 3
    assert [s.blocks[-1].attn.window for s in cswin.stages[:3]] == [(7, 7), (7, 7),
                                                                    (14, 14)]
    assert cswin.stages[0].blocks[0].attn.global_heads == 1  # 2 heads, 1:1


def test_local_plans_are_plain_swin_and_cswin():
    swin = SwinELFATT(arch='b', attn='local')
    assert all(isinstance(b.attn, ShiftedWindowAttention) and b.attn.lepe is None
               for s in swin.stages for b in s.blocks)
    assert [b.attn.shift_size for b in swin.stages[2].blocks[:3]] == [0, 3, 0]
    cswin = CSWin(arch='b', attn='local')
    assert attn_types(cswin)[:3] == [[CrossShapedWindowAttention] * d
                                     for d in (3, 6, 29)]
    assert attn_types(cswin)[3] == [SoftmaxAttention] * 2  # CSWin's last stage
    assert [s.blocks[0].attn.split_size for s in cswin.stages[:3]] == [1, 2, 7]


def test_cswin_arch_dict_may_leave_out_split_and_block_sizes():
    arch = dict(embed_dims=16, depths=(1, 1, 1, 1), num_heads=(2, 2, 2, 4))
    default = CSWin(arch=arch, attn='local')
    assert [s.blocks[0].attn.split_size for s in default.stages[:3]] == [1, 2, 7]
    given = CSWin(arch=arch, attn='E,E,E,E', split_sizes=(1, 1, 2, 2),
                  block_sizes=(4, 9, 16, 4))
    assert given.split_sizes == (1, 1, 2, 2)
    assert [s.blocks[0].attn.block_size for s in given.stages] == [4, 9, 16, 4]


def test_table_4_to_7_variants_by_config():
    m = tiny(CSWin, attn='E,E,E,E', block_sizes=(4, 9, 16, 4), global_ratio=0.25,
             lepe=False)
    attn = m.stages[1].blocks[0].attn
    assert attn.block_size == 9 and attn.global_channels == 8 and attn.lepe is None
    assert attn.block_layout == '2d' and attn.window == (3, 3)
    raster = tiny(CSWin, attn='E,E,E,E', block_sizes=(4, 8, 16, 4), block_layout='1d')
    assert raster.stages[1].blocks[0].attn.block_layout == '1d'
    rect = tiny(CSWin, block_sizes=(4, 8, 16, 4))  # a non-square block: 2x4 windows
    assert rect.stages[1].blocks[0].attn.window == (2, 4)
    assert attn_types(tiny(CSWin, attn='E,G,G,G'))[1] == [SoftmaxAttention] * 2
    eff = tiny(SwinELFATT, attn='effatt').stages[0].blocks[0].attn
    assert eff.local_heads == 0 and eff.global_heads == 2
    mixed = tiny(SwinELFATT, attn=['local', 'GE', ['effatt', 'local'], 'E'])
    kinds = attn_types(mixed)
    assert kinds[0] == [ShiftedWindowAttention] * 2
    assert kinds[2] == [EFFATTAttention, ShiftedWindowAttention]
    assert mixed.mixers[2] == ['effatt', 'shifted_window']


# Table 1: ImageNet classifiers (backbone + 1000-class linear head), millions:
# (ELFATT row, LOCAL / GLOBAL / EFFATT rows). Swin's ELFATT models merge patches
# with 3x3/2 convs, the others linearly (see docs/design.md, "ELFATT").
TABLE1 = {('CSWin', 't'): (20, 20), ('CSWin', 'b'): (73, 73),
          ('SwinELFATT', 't'): (30, 28), ('SwinELFATT', 'b'): (91, 88)}


@pytest.mark.parametrize('cls', BACKBONES)
@pytest.mark.parametrize('arch', ['t', 'b'])
def test_params_next_to_table1(cls, arch):
    counts = {}
    for attn in ('elfatt', 'local', 'global', 'effatt'):
        model = cls(arch=arch, attn=attn, out_indices=(3, ))
        counts[attn] = (count(model) + model.num_features[3] * 1001) / 1e6
    elfatt, others = TABLE1[(cls.__name__, arch)]
    paper = {k: elfatt if k == 'elfatt' else others for k in counts}
    print(f'{cls.__name__}-{arch.upper()}: ' + ', '.join(
        f'{k.upper()} {v:.2f}M (Table 1: {paper[k]}M)' for k, v in counts.items()))
    assert {k: round(v) for k, v in counts.items()} == paper


def test_swin_downsample_choice():
    """ELFATT plans merge with convs; other plans, converted official weights and
    downsample='linear' merge linearly (Swin's PatchMerging)."""
    def swin(**kwargs):
        model = SwinELFATT(arch=TINY[SwinELFATT], block_sizes=TINY_BLOCKS, **kwargs)
        kinds = {type(s.downsample) for s in model.stages[:3]}
        assert len(kinds) == 1
        return model.downsample, kinds.pop()

    assert swin() == swin(attn='E,G,G,G') == ('conv', ConvMerging)
    assert swin(attn='local', downsample='conv') == ('conv', ConvMerging)
    for kwargs in (dict(attn='local'), dict(attn='effatt'), dict(attn='global'),
                   dict(downsample='linear'), dict(convert_weights=True)):
        assert swin(**kwargs) == ('linear', PatchMerging), kwargs
    with pytest.raises(ValueError, match="downsample='linear'"):
        swin(downsample='conv', convert_weights=True)
    with pytest.raises(ValueError, match='downsample must be'):
        swin(downsample='pool')


# ------------------------------------------------------- backbone behaviour
@pytest.mark.parametrize('cls', BACKBONES)
@pytest.mark.parametrize('attn', ['elfatt', 'local', 'global', 'effatt'])
@pytest.mark.parametrize('hw', [(64, 64), (67, 45)])
def test_any_input_size(cls, attn, hw):
    model = tiny(cls, attn=attn).eval()
    with torch.no_grad():
        outs = model(torch.randn(1, 3, *hw))
    assert len(outs) == 4
    h, w = hw
    for i, out in enumerate(outs):
        # Swin: 4x4 patches with corner padding; CSWin: a 7x7/4 conv padded to
        # ceil(H / 4) rows; then ceil halving
        size = (-(-h // 4), -(-w // 4))
        for _ in range(i):
            size = tuple(-(-s // 2) for s in size)
        assert out.shape == (1, 16 * 2**i, *size)
        assert torch.isfinite(out).all()


@pytest.mark.parametrize('cls', BACKBONES)
def test_out_indices_and_abs_pos_embed(cls):
    model = tiny(cls, out_indices=(1, 3), use_abs_pos_embed=True,
                 pretrain_img_size=64).eval()
    assert not hasattr(model, 'norm0') and hasattr(model, 'norm3')
    assert model.absolute_pos_embed.shape[1] == (64 // 4)**2
    with torch.no_grad():
        outs = model(torch.randn(1, 3, 96, 80))
    assert [o.shape[1] for o in outs] == [32, 128]


@pytest.mark.parametrize('cls', BACKBONES)
def test_frozen_stages_and_norm_eval(cls):
    model = tiny(cls, frozen_stages=2, norm_eval=True)
    model.train()
    frozen = [model.patch_embed, model.stages[0], model.stages[1], model.norm0,
              model.norm1]
    for m in frozen:
        assert not m.training and not any(p.requires_grad for p in m.parameters())
    assert model.stages[2].training
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optim = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1)
    sum(o.mean() for o in model(torch.randn(2, 3, 64, 64))).backward()
    optim.step()
    for k, v in model.state_dict().items():
        if k.startswith(('patch_embed', 'stages.0.', 'stages.1.', 'norm0', 'norm1')):
            assert torch.equal(before[k], v), k
    assert not torch.equal(before['stages.2.blocks.0.attn.qkv.weight'],
                           model.state_dict()['stages.2.blocks.0.attn.qkv.weight'])


@pytest.mark.parametrize('cls', BACKBONES)
def test_pretrained_init_cfg(cls, tmp_path):
    src = tiny(cls)
    path = tmp_path / 'backbone.pth'
    torch.save({'state_dict': {f'backbone.{k}': v
                               for k, v in src.state_dict().items()}}, path)
    model = tiny(cls, init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    for k, v in model.state_dict().items():
        assert torch.equal(v, src.state_dict()[k]), k


def test_autocast_bfloat16():
    model = tiny(CSWin).eval()
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        outs = model(torch.randn(1, 3, 64, 96))
    assert all(torch.isfinite(o.float()).all() for o in outs)


def test_errors():
    with pytest.raises(ValueError, match='strides'):
        SwinELFATT(arch='t', strides=(4, 2, 1, 2))
    with pytest.raises(ValueError, match='one pattern per stage'):
        CSWin(arch='t', attn='E,E,G')
    with pytest.raises(ValueError, match='out_indices'):
        CSWin(arch='t', out_indices=(4, ))


# ------------------------------------------------------ downstream registries
NECK_IN = [16, 32, 64, 128]
@pytest.mark.parametrize('scope', ['mmseg', 'mmdet', 'mmpretrain'])
@pytest.mark.parametrize('cls', BACKBONES)
def test_builds_from_downstream_registries(scope, cls):
    register_scope(scope)
    registry = importlib.import_module(f'{scope}.registry').MODELS
    backbone = dict(type=f'mmhybrid.{cls.__name__}', arch=TINY[cls],
                    block_sizes=TINY_BLOCKS,
                    out_indices=(3, ) if scope == 'mmpretrain' else (0, 1, 2, 3))
    cfg = downstream_model_cfg(scope, backbone, NECK_IN)
    with DefaultScope.overwrite_default_scope(scope):
        model = registry.build(cfg)
    assert isinstance(model.backbone, cls)
    feats = model.extract_feat(torch.randn(1, 3, 64, 64))
    assert torch.isfinite(feats[-1]).all()


def test_swin_accepts_mmdet_swin_kwargs_and_paramwise_keys():
    """mmdet's Swin backbone config builds SwinELFATT by changing only ``type``, and
    the mmseg/mmdet Swin ``paramwise_cfg`` keys select the same parameters."""
    register_scope('mmdet')
    from mmdet.registry import MODELS
    swin = dict(embed_dims=16, depths=[2, 2, 2, 2], num_heads=[2, 2, 4, 4],
                window_size=4, mlp_ratio=4, qkv_bias=True, qk_scale=None,
                drop_rate=0., attn_drop_rate=0., drop_path_rate=0.2, patch_norm=True,
                out_indices=(0, 1, 2, 3), with_cp=False, convert_weights=True,
                use_abs_pos_embed=True, pretrain_img_size=128)
    with DefaultScope.overwrite_default_scope('mmdet'):
        ref = MODELS.build(dict(type='SwinTransformer', **swin))
        ours = MODELS.build(dict(type='mmhybrid.SwinELFATT', attn='local', **swin))
    for key in ('absolute_pos_embed', 'relative_position_bias_table', 'norm'):
        sizes = [sorted(p.numel() for n, p in m.named_parameters() if key in n)
                 for m in (ref, ours)]
        assert sizes[0] == sizes[1], key
    assert count(ref) == count(ours)
    # same weights -> same features wherever no padding is needed (stages 1-3 at
    # 128^2; on padded maps we mask the padding, mmdet does not)
    ours.load_state_dict({k.replace('.attn.w_msa.', '.attn.'): v
                          for k, v in ref.state_dict().items()
                          if not k.endswith('relative_position_index')})
    ref.eval(), ours.eval()
    x = torch.randn(1, 3, 128, 128)
    with torch.no_grad():
        ref_outs, our_outs = ref(x), ours(x)
    assert [o.shape for o in ref_outs] == [o.shape for o in our_outs]
    for a, b in zip(ref_outs[:3], our_outs[:3]):
        torch.testing.assert_close(a, b)
