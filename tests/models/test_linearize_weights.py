"""Weight inheritance (issue 36, InfiniteVL Sec. 3.3): Swin, DeiT and ViT
checkpoints, saved by the real source models of the installed packages (timm,
mmpretrain, mmseg; official Swin in its exact key layout) with random weights,
into SoLA, InfiniteVL, SwinELFATT and InfViT students through
``init_cfg=dict(type='Pretrained', ...)``. Every student tensor with a teacher
counterpart must equal the source model's tensor; new tensors start as the
rules say (zero residual branches, identity convs, no token shift)."""
import re

import pytest
import torch

import mmhybrid  # noqa: F401
from mmhybrid.models.backbones import InfiniteVLVision, InfViT, SoLAVision, SwinELFATT
from mmhybrid.models.backbones.infinitevl_vision import ARCH_ZOO as IVL_ZOO
from mmhybrid.models.backbones.sola_vision import ARCH_ZOO as SOLA_ZOO
from mmhybrid.models.distillers.layer_pairs import teacher_index
from tests.models.test_weight_sources import (mmpretrain_model, official_from_timm,
                                              perturbed, pretrained, report_parts,
                                              reports)

__all__ = ['reports']  # the fixture

TINY = dict(embed_dims=16, heads=(2, 4, 8, 16))  # head_dim 8, as the students


def swin_source(kind, depths=(2, 2, 6, 2), embed_dims=16, heads=(2, 4, 8, 16),
                window=2):
    """(source model, its state dict as saved) of a random Swin."""
    if kind in ('timm', 'official'):
        from timm.models.swin_transformer import SwinTransformer
        src = perturbed(SwinTransformer(
            img_size=64, patch_size=4, embed_dim=embed_dims, depths=depths,
            num_heads=heads, window_size=window, num_classes=5, drop_path_rate=0.))
        sd = src.state_dict()
        return src, (official_from_timm(sd, window) if kind == 'official' else sd)
    arch = dict(embed_dims=embed_dims, depths=depths, num_heads=heads)
    if kind == 'mmpretrain':
        src = perturbed(mmpretrain_model(dict(
            type='SwinTransformer', arch=arch, img_size=64, window_size=window,
            drop_path_rate=0., out_indices=(0, 1, 2, 3))))
    else:
        from mmseg.models.backbones import SwinTransformer
        from mmhybrid.utils import register_scope
        register_scope('mmseg')
        src = perturbed(SwinTransformer(
            pretrain_img_size=64, window_size=window, drop_path_rate=0.,
            out_indices=(0, 1, 2, 3), embed_dims=embed_dims, depths=depths,
            num_heads=heads))
    return src, {f'backbone.{k}': v for k, v in src.state_dict().items()}


def block_tensor(sd, kind, i, j, name):
    """The source's tensor ``name`` (qkv.weight, proj.bias, fc1.weight, norm1.bias
    ...) of stage i, block j, whatever its package calls it."""
    if kind in ('timm', 'official'):
        attn, fc = f'layers.{i}.blocks.{j}.attn.', f'layers.{i}.blocks.{j}.mlp.'
        fcs = {'fc1': fc + 'fc1', 'fc2': fc + 'fc2'}
        pre = f'layers.{i}.blocks.{j}.'
    else:
        pre = f'backbone.stages.{i}.blocks.{j}.'
        attn = pre + 'attn.w_msa.'
        fcs = {'fc1': pre + 'ffn.layers.0.0', 'fc2': pre + 'ffn.layers.1'}
    part, what = name.split('.')
    if part in fcs:
        return sd[f'{fcs[part]}.{what}']
    return sd[(attn if part in ('qkv', 'proj') else pre) + name]


def save(sd, path, kind):
    torch.save({'model': sd} if kind in ('timm', 'official') else {'state_dict': sd},
               path)
    return path


def check_pyramid_student(model, sd, kind, teacher_depths):
    """Every student tensor with a counterpart equals the source's; the new ones
    start as the rules say."""
    for i, stage in enumerate(model.stages):
        for j, block in enumerate(stage):
            k = teacher_index(j, len(stage), teacher_depths[i])
            t = lambda name: block_tensor(sd, kind, i, k, name)  # noqa: E731
            for norm in ('norm1', 'norm2'):
                for w in ('weight', 'bias'):
                    assert torch.equal(getattr(block, norm).state_dict()[w],
                                       t(f'{norm}.{w}'))
            attn, ffn = block.attn, block.ffn
            q, kk, v = t('qkv.weight').chunk(3)
            name = type(attn).__name__
            if name == 'SpatialMix':
                for ours, theirs in (('receptance', q), ('key', kk), ('value', v),
                                     ('output', t('proj.weight'))):
                    assert torch.equal(getattr(attn, ours).weight, theirs)
                assert torch.equal(attn.shift_mix.mix,
                                   torch.ones_like(attn.shift_mix.mix))
            elif name == 'BidirectionalGatedDeltaNet':
                assert torch.equal(attn.qkv.weight, t('qkv.weight'))
                assert torch.equal(attn.o_proj.weight, t('proj.weight'))
                centre = attn.conv.weight[:, 0, 1, 1]
                assert torch.equal(centre, torch.ones_like(centre))
                assert attn.conv.weight.abs().sum() == centre.numel()
            else:  # softmax, sliding window
                assert torch.equal(attn.qkv.weight, t('qkv.weight'))
                assert torch.equal(attn.qkv.bias, t('qkv.bias'))
                assert torch.equal(attn.proj.bias, t('proj.bias'))
            if type(ffn).__name__ == 'ChannelMix':
                assert torch.equal(ffn.key.weight, t('fc1.weight'))
                assert torch.equal(ffn.value.weight, 2 * t('fc2.weight'))
                assert not ffn.receptance.weight.any()
            else:  # ConvMlp: the teacher's MLP, dwconv the identity
                assert torch.equal(ffn.fc1.weight, t('fc1.weight'))
                assert torch.equal(ffn.fc2.bias, t('fc2.bias'))
                x = torch.randn(1, ffn.dwconv.in_channels, 5, 5)
                assert torch.equal(ffn.dwconv(x), x)
    for bridge in model.bridges.values():
        assert not bridge.proj.weight.any() and not bridge.proj.bias.any()
    assert not model.pos_embed.any()


@pytest.mark.parametrize('kind', ['timm', 'mmpretrain', 'official', 'mmseg'])
def test_swin_t_into_sola_s(kind, tmp_path, reports):
    """Swin-T's layout (widths 16x, head_dim 8 for speed) into SoLA-S's
    schedule with its bridges: the source's tensors where they have a place."""
    src, sd = swin_source(kind)
    path = save(sd, tmp_path / f'swin_{kind}.pth', kind)
    model = pretrained(SoLAVision, path, head_dim=8, arch=dict(
        SOLA_ZOO['s'], embed_dims=(16, 32, 64, 128)))
    check_pyramid_student(model, sd, kind, (2, 2, 6, 2))
    stem = ('patch_embed.proj.weight' if kind in ('timm', 'official')
            else 'backbone.patch_embed.projection.weight')
    assert torch.equal(model.patch_embed.projection.weight, sd[stem])
    # the merges: as the Swin-ELFATT of the same file (tested equal to the source)
    swin = pretrained(SwinELFATT, path, arch=dict(embed_dims=16, depths=(2, 2, 6, 2),
                                                  num_heads=(2, 4, 8, 16)),
                      attn='local', downsample='linear', window_size=2)
    for i in range(3):
        assert torch.equal(model.downsamples[i].reduction.weight,
                           swin.stages[i].downsample.reduction.weight)
    line = reports[0]
    loaded, total, fmt, counts = report_parts(line)
    assert counts['unexpected'] == 0 and counts[r'\(checkpoint vs model\)'] == 0
    assert 'SpatialMix (receptance<-q, key<-k, value<-v, output<-proj' in line
    assert 'HiddenStateBridge (new proj zero' in line
    assert re.search(r'dropping \d+ of its \d+ backbone tensors', line)


@pytest.mark.slow
def test_full_size_swin_t_into_sola_s(tmp_path, reports):
    """The real sizes: timm's Swin-T (window 7) into SoLAVision(arch='s')."""
    from timm.models.swin_transformer import SwinTransformer
    src = SwinTransformer(num_classes=10)
    sd = src.state_dict()
    path = save(sd, tmp_path / 'swin_tiny_patch4_window7_224.pth', 'timm')
    model = pretrained(SoLAVision, path, arch='s')
    check_pyramid_student(model, sd, 'timm', (2, 2, 6, 2))
    assert reports[0].startswith('SoLAVision: loaded ')


@pytest.mark.parametrize('student', ['sola-s-gdn', 'infinitevl-s'])
def test_swin_t_into_gated_deltanet_students(student, tmp_path, reports):
    src, sd = swin_source('mmseg')
    path = save(sd, tmp_path / 'swin.pth', 'mmseg')
    cls, arch = ((SoLAVision, SOLA_ZOO['s-gdn']) if student == 'sola-s-gdn'
                 else (InfiniteVLVision, IVL_ZOO['s']))
    model = pretrained(cls, path, head_dim=8, window_size=3,
                       arch=dict(arch, embed_dims=(16, 32, 64, 128)))
    check_pyramid_student(model, sd, 'mmseg', (2, 2, 6, 2))
    assert 'BidirectionalGatedDeltaNet (qkv<-q|k|v, o_proj<-proj' in reports[0]


@pytest.mark.parametrize('cls', [SoLAVision, InfiniteVLVision])
def test_swin_b_layout_into_16_layer_stage_3(cls, tmp_path, reports):
    """Swin-B's depths (2, 2, 18, 2) into SoLA-B / InfiniteVL-B's (2, 2, 16, 2):
    student layer j of stage 3 takes teacher layer round(j * 17 / 15)."""
    depths = (2, 2, 18, 2)
    src, sd = swin_source('mmpretrain', depths=depths)
    path = save(sd, tmp_path / 'swin_b.pth', 'mmpretrain')
    zoo = SOLA_ZOO if cls is SoLAVision else IVL_ZOO
    model = pretrained(cls, path, head_dim=8, window_size=3,
                       arch=dict(zoo['b'], embed_dims=(16, 32, 64, 128)))
    assert [len(s) for s in model.stages] == [2, 2, 16, 2]
    check_pyramid_student(model, sd, 'mmpretrain', depths)
    assert 'stage 3: 16 layers from 18 (teacher layers [5, 14] dropped)' in reports[0]


def test_swin_into_every_swin_elfatt_plan_keeps_its_function(tmp_path, reports):
    """The local plan is Swin itself through the rules: same outputs as timm."""
    src, sd = swin_source('timm')
    path = save(sd, tmp_path / 'swin.pth', 'timm')
    model = pretrained(SwinELFATT, path, arch=dict(
        embed_dims=16, depths=(2, 2, 6, 2), num_heads=(2, 4, 8, 16)),
        attn='local', downsample='linear', window_size=2, out_indices=(3, ))
    assert 'from softmax layers' not in reports[0]  # every rule a plain copy
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x)[0],
                                   src.forward_features(x).permute(0, 3, 1, 2),
                                   rtol=0, atol=1e-5)


VIT = dict(embed_dims=32, depth=4, num_heads=2, mlp_ratio=4.)


def vit_sources():
    """(name, state dict as saved, {layer: (qkv weight, fc1 weight)}) of the ViT
    family: timm / official DeiT, DeiT-III, mmpretrain, mmseg."""
    from mmseg.models.backbones import VisionTransformer as MMSegViT
    from timm.models.vision_transformer import VisionTransformer
    out = []
    for name, kwargs in (('deit', {}), ('deit3', dict(no_embed_class=True,
                                                     init_values=1e-1))):
        src = perturbed(VisionTransformer(img_size=32, patch_size=8, embed_dim=32,
                                          depth=4, num_heads=2, num_classes=5,
                                          **kwargs))
        sd = src.state_dict()
        out.append((name, {'model': sd}, lambda i, sd=sd: (
            sd[f'blocks.{i}.attn.qkv.weight'], sd[f'blocks.{i}.mlp.fc1.weight'])))
    src = perturbed(mmpretrain_model(dict(
        type='VisionTransformer', arch=dict(embed_dims=32, num_layers=4, num_heads=2,
                                            feedforward_channels=128),
        img_size=32, patch_size=8, out_type='featmap')))
    sd = {f'backbone.{k}': v for k, v in src.state_dict().items()}
    out.append(('mmpretrain', {'state_dict': sd}, lambda i, sd=sd: (
        sd[f'backbone.layers.{i}.attn.qkv.weight'],
        sd[f'backbone.layers.{i}.ffn.layers.0.0.weight'])))
    src = perturbed(MMSegViT(img_size=32, patch_size=8, embed_dims=32, num_layers=4,
                             num_heads=2, final_norm=True, drop_path_rate=0.))
    sd = {f'backbone.{k}': v for k, v in src.state_dict().items()}
    out.append(('mmseg', {'state_dict': sd}, lambda i, sd=sd: (
        sd[f'backbone.layers.{i}.attn.attn.in_proj_weight'],
        sd[f'backbone.layers.{i}.ffn.layers.0.0.weight'])))
    return out


@pytest.mark.parametrize('mixers', ['LLLS', 'GGGS', 'IIIS', 'WPES'])
def test_vit_family_into_infvit_any_layout(mixers, tmp_path, reports):
    """"Linearize my ViT, keep every fourth layer softmax": every format of the
    ViT family into InfViT with that layout; the softmax layer and all MLPs are
    the source's."""
    for name, saved, tensors in vit_sources():
        path = tmp_path / f'{name}.pth'
        torch.save(saved, path)
        scale = dict(layer_scale_init_value=1.) if name == 'deit3' else {}
        model = pretrained(InfViT, path, arch=VIT, mixers=mixers, img_size=32,
                           patch_size=8, mixer_cfg=dict(W=dict(window_size=3),
                                                        E=dict(block_size=4)),
                           **scale)
        loaded, total, fmt, counts = report_parts(reports[-1])
        assert counts['missing'] == 0 and counts['unexpected'] == 0, reports[-1]
        for i, layer in enumerate(model.layers):
            qkv, fc1 = tensors(i)
            q, k, v = qkv.chunk(3)
            assert torch.equal(layer.ffn.fc1.weight, fc1)
            attn = layer.attn
            if hasattr(attn, 'receptance'):
                assert torch.equal(attn.receptance.weight, q)
                assert torch.equal(attn.value.weight, v)
            elif hasattr(attn, 'gamma_logit'):
                assert torch.equal(attn.q.weight, q) and torch.equal(attn.v.weight, v)
            else:  # softmax, sliding window, ELFATT, Gated DeltaNet
                assert torch.equal(attn.qkv.weight, qkv)
            if getattr(attn, 'lepe', None) is not None:
                assert not attn.lepe.weight.any()


@pytest.mark.slow
def test_mmpretrain_deit_s_into_infvit_llls(tmp_path, reports):
    clf = perturbed(mmpretrain_model(dict(
        type='ImageClassifier', backbone=dict(type='VisionTransformer',
                                              arch='deit-small', drop_path_rate=0.),
        head=dict(type='VisionTransformerClsHead', num_classes=10, in_channels=384))))
    path = tmp_path / 'deit-s.pth'
    torch.save({'state_dict': clf.state_dict()}, path)
    model = pretrained(InfViT, path, arch=dict(embed_dims=384, depth=12, num_heads=6,
                                               mlp_ratio=4.), mixers='LLLS')
    sd = clf.state_dict()
    for i in (3, 7, 11):  # the softmax layers: the source's attention
        assert torch.equal(model.layers[i].attn.qkv.weight,
                           sd[f'backbone.layers.{i}.attn.qkv.weight'])
    assert torch.equal(model.layers[0].attn.key.weight,
                       sd['backbone.layers.0.attn.qkv.weight'][384:768])
    assert 'SpatialMix (receptance<-q' in reports[0] and ' x9' in reports[0]


@pytest.mark.parametrize('change, message', [
    (dict(embed_dims=(16, 32, 48, 128)), r'stage 3: 48 channels, the teacher 64'),
    (dict(mixers='LL/LL/LLSLLSL/LS'), r'stage 3: 7 layers, the teacher 6'),
])
def test_mismatched_pair_is_one_clear_error(change, message, tmp_path):
    src, sd = swin_source('timm')
    path = save(sd, tmp_path / 'swin.pth', 'timm')
    arch = dict(SOLA_ZOO['s'], **dict(dict(embed_dims=(16, 32, 64, 128)), **change))
    with pytest.raises(ValueError, match=message + r'.*Pairs we support: Swin-T'):
        pretrained(SoLAVision, path, head_dim=8, arch=arch)


def test_mismatched_heads_and_family_are_clear_errors(tmp_path):
    src, sd = swin_source('timm')
    path = save(sd, tmp_path / 'swin.pth', 'timm')
    with pytest.raises(ValueError, match=r'stage 3, layer 3 attn: SoftmaxAttention '
                                         r'has 4 heads, the teacher layer 8'):
        pretrained(SoLAVision, path, head_dim=16,
                   arch=dict(SOLA_ZOO['s'], embed_dims=(16, 32, 64, 128)))
    with pytest.raises(ValueError, match=r'converts into SwinELFATT, SoLAVision, not '
                                         r'InfViT\. Pairs we support'):
        pretrained(InfViT, path, arch=VIT, mixers='S')
