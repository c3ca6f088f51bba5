"""InfViT backbone: paper param counts, InfSA layers, OpenMMLab backbone behaviour."""
from pathlib import Path

import mmengine
import pytest
import torch
from mmengine.registry import DefaultScope

import mmhybrid  # noqa: F401
from mmhybrid.layers.mixers import InfSAttention
from mmhybrid.models.backbones import InfViT
from mmhybrid.models.backbones.infvit import ARCH_ZOO
from mmhybrid.ops.infsa import naive_linear_infsa, naive_pure_infsa
from mmhybrid.utils import register_scope

# Table 1 / 3 parameter counts (classifier included) from configs/infvit/metafile.yml
PAPER_PARAMS = {
    m['Paper Figures']['Cfg Options']['model.backbone.arch']: m['Metadata']['Parameters']
    for m in mmengine.load(Path(__file__).resolve().parents[2] /
                           'configs/infvit/metafile.yml')['Models']
    if 'Paper Figures' in m}
TINY = dict(embed_dims=32, depth=3, num_heads=4, mlp_ratio=2., attn_types='PLP')


def tiny(**kwargs):
    kwargs.setdefault('arch', TINY)
    kwargs.setdefault('patch_size', 8)
    kwargs.setdefault('img_size', 32)
    kwargs.setdefault('drop_path_rate', 0.)
    model = InfViT(**kwargs)
    model.init_weights()
    return model


def count(model):
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize('arch,attn_types', [(a, None) for a in sorted(PAPER_PARAMS)] + [
    ('pure-4l', 'S'), ('pure-24l', 'S')])  # Table 1's "Standard ViT" rows: 57.7M / 330.6M
def test_params_match_paper(arch, attn_types):
    """Table 1/3 count the classifier: backbone + a 1000-way linear head."""
    with torch.device('meta'):
        model = InfViT(arch=arch, attn_types=attn_types)
    dims = ARCH_ZOO[arch]['embed_dims']
    params = count(model) + dims * 1000 + 1000
    paper = PAPER_PARAMS[arch]
    print(f'InfViT {arch} ({attn_types or "paper"}): {params / 1e6:.2f}M with head '
          f'(paper {paper / 1e6}M, {100 * (params / paper - 1):+.2f}%)')
    assert abs(params / paper - 1) < 0.03


def test_vit_b_sized_variants():
    with torch.device('meta'):
        pure, linear, vit = (InfViT(arch='pure-b'),
                             InfViT(arch='linear-b'),
                             InfViT(arch='pure-b', attn_types='S'))
    assert abs(count(vit) / 85.8e6 - 1) < 0.01  # ViT-B/16 backbone
    assert count(pure) - count(vit) == 12 * 12  # only the gammas differ
    assert count(pure) - count(linear) == 12 * (768 * 768 + 768) - 12 * (48 - 12)


@pytest.mark.parametrize('hw', [(32, 32), (45, 70), (8, 9), (100, 37)])
@pytest.mark.parametrize('with_cls_token', [True, False])
def test_output_shapes_any_size(hw, with_cls_token):
    model = tiny(out_indices=(0, 1, 2), with_cls_token=with_cls_token,
                 local_path='lepe').eval()
    with torch.no_grad():
        outs = model(torch.randn(2, 3, *hw))
    grid = (-(-hw[0] // 8), -(-hw[1] // 8))
    assert [tuple(o.shape) for o in outs] == [(2, 32, *grid)] * 3
    assert all(torch.isfinite(o).all() for o in outs)


def attention_reference(attn, x, hw_shape):
    """InfSAttention written out with the naive ops (Eq. 12/23 and 21)."""
    B, N, C = x.shape
    H, d = attn.num_heads, C // attn.num_heads
    heads = lambda t: t.view(B, N, H, d).transpose(1, 2)  # noqa: E731
    q = heads(attn.q(x))
    k = q if attn.k is None else heads(attn.k(x))
    v = heads(attn.v(x))
    gamma = torch.sigmoid(attn.gamma_logit)[:, None, None]
    if attn.variant == 'pure':  # Eq. 12; 'depth': Eq. 23's gamma^t on layer t
        t = attn.depth if attn.discount == 'depth' else 1
        z = naive_pure_infsa(q, k, v) * gamma**t
    else:  # Eq. 21: w = gamma a
        z = naive_linear_infsa(q, k, v) * gamma
    z = z.transpose(1, 2).reshape(B, N, C)
    if attn.lepe is not None:
        grid = attn.v(x)[:, N - hw_shape[0] * hw_shape[1]:]
        grid = grid.transpose(1, 2).reshape(B, C, *hw_shape)
        local = attn.lepe(grid).flatten(2).transpose(1, 2)
        z = z + torch.cat((local.new_zeros(B, N - local.shape[1], C), local), 1)
    return attn.proj(z)


@pytest.mark.parametrize('variant,tie_qk,discount', [
    ('pure', False, 'layer'), ('pure', True, 'layer'), ('pure', False, 'depth'),
    ('linear', True, 'layer'), ('linear', False, 'layer'), ('linear', True, 'depth')])
@pytest.mark.parametrize('local_path', [None, 'lepe'])
def test_attention_matches_reference_and_gamma_trains(variant, tie_qk, discount,
                                                      local_path):
    attn = InfSAttention(24, 3, variant, tie_qk=tie_qk, depth=3, discount=discount,
                         local_path=local_path).double()
    assert (attn.k is None) == tie_qk
    x = torch.randn(2, 1 + 5 * 7, 24, dtype=torch.float64)
    out, _ = attn(x, (5, 7))
    ref = attention_reference(attn, x, (5, 7))
    assert out.shape == ((2, 36, 24) if variant == 'pure' or local_path else
                         (2, 1, 24))
    torch.testing.assert_close(out.expand_as(ref), ref)
    out.square().sum().backward()
    assert attn.gamma_logit.grad.abs().min() > 0
    torch.testing.assert_close(attn.gamma, torch.full((3, ), 0.7,
                                                      dtype=torch.float64))


def test_discount_keeps_deep_layers_alive_at_init():
    """Default: every layer scales its attention by gamma = 0.7 once (the public
    code's per-layer rho), so the 24th layer of pure-24l starts at 0.7, not at
    0.7^24 = 2e-4 as with the literal per-depth discount."""
    arch = dict(embed_dims=16, depth=24, num_heads=2, mlp_ratio=1., attn_types='P')
    for discount, last in (('layer', 0.7), ('depth', 0.7**24)):
        with torch.device('meta'):
            model = InfViT(arch=arch, discount=discount)
        scales = [layer.attn.gamma_init**layer.attn.power for layer in model.layers]
        assert scales[0] == pytest.approx(0.7) and scales[-1] == pytest.approx(last)
    with pytest.raises(ValueError, match='discount'):
        InfSAttention(16, 2, discount='path')


def test_linear_layers_build_no_token_by_token_matrix():
    """A linear layer's attention branch is one (B, 1, C) context per image."""
    model = tiny(arch=dict(TINY, attn_types='LLL')).eval()
    shapes = []
    hooks = [layer.attn.register_forward_hook(
        lambda m, i, o: shapes.append(tuple(o[0].shape))) for layer in model.layers]
    with torch.no_grad():
        model(torch.randn(1, 3, 64, 48))
    for h in hooks:
        h.remove()
    assert shapes == [(1, 1, 32)] * 3


def test_mixed_and_softmax_layers():
    model = tiny(attn_types=['softmax', 'linear', 'pure'])
    assert model.mixers == [['softmax', 'linear_infsa', 'pure_infsa']]
    assert [getattr(layer.attn, 'variant', 'softmax') for layer in model.layers] == [
        'softmax', 'linear', 'pure']
    assert [layer.attn.depth for layer in model.layers[1:]] == [2, 3]
    model(torch.randn(1, 3, 32, 40))[0].sum().backward()
    with pytest.raises(ValueError, match='attn_types'):
        tiny(attn_types='PX')
    with pytest.raises(KeyError, match='unknown InfViT arch'):
        InfViT(arch='huge')


def test_frozen_stages_and_train_mode():
    model = tiny(frozen_stages=2)
    model.train()
    assert not model.pos_embed.requires_grad and not model.cls_token.requires_grad
    assert all(not p.requires_grad for p in model.layers[1].parameters())
    assert all(p.requires_grad for p in model.layers[2].parameters())
    assert not model.layers[0].training and model.layers[2].training



def test_pretrained_resizes_pos_embed(tmp_path):
    src = tiny(img_size=32)
    path = tmp_path / 'infvit.pth'
    torch.save({'state_dict': {f'backbone.{k}': v
                               for k, v in src.state_dict().items()}}, path)
    dst = tiny(img_size=64, init_cfg=dict(type='Pretrained',
                                          checkpoint=str(path)))
    assert dst.pos_embed.shape == (1, 1 + 64, 32)
    torch.testing.assert_close(dst.layers[1].attn.q.weight,
                               src.layers[1].attn.q.weight)
    torch.testing.assert_close(dst.cls_token, src.cls_token)


def public_layout(model, rho_logit):
    """The state dict of the public ``infsa`` ViT for the same weights."""
    sd = model.state_dict()
    out = {'patch_embed.weight': sd['patch_embed.projection.weight'],
           'patch_embed.bias': sd['patch_embed.projection.bias'],
           'cls_token': sd['cls_token'], 'pos_embed': sd['pos_embed'],
           'encoder.norm.weight': sd['norm2.weight'],
           'encoder.norm.bias': sd['norm2.bias'],
           'head.weight': torch.randn(10, 32), 'head.bias': torch.zeros(10)}
    names = {'q': 'q_proj', 'k': 'k_proj', 'v': 'v_proj', 'proj': 'out_proj'}
    for i in range(3):
        pre = f'encoder.layers.{i}.'
        for ours, theirs in names.items():
            for p in ('weight', 'bias'):
                key = f'layers.{i}.attn.{ours}.{p}'
                if key in sd:
                    out[f'{pre}attn.{theirs}.{p}'] = sd[key]
        out[f'{pre}attn.rho_logit'] = torch.tensor(rho_logit)
        for ours, theirs in (('ffn.fc1', 'ff.0'), ('ffn.fc2', 'ff.3'),
                             ('norm1', 'norm1'), ('norm2', 'norm2')):
            for p in ('weight', 'bias'):
                out[f'{pre}{theirs}.{p}'] = sd[f'layers.{i}.{ours}.{p}']
    return out


@pytest.mark.parametrize('discount', ['layer', 'depth'])
def test_converter_from_public_infsa_layout(tmp_path, discount):
    src = tiny(out_indices=(2, ), tie_qk=False, discount=discount)
    for p in src.parameters():
        p.data.normal_()
    path = tmp_path / 'public.pth'
    torch.save(public_layout(src, 1.5), path)
    dst = tiny(out_indices=(2, ), tie_qk=False, discount=discount,
               init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    rho = torch.sigmoid(torch.tensor(1.5))
    for i, layer in enumerate(dst.layers):
        pure_depth = discount == 'depth' and layer.attn.variant == 'pure'
        t = layer.attn.depth if pure_depth else 1
        # rho scales the attention of each public layer once: gamma^power == rho
        torch.testing.assert_close(layer.attn.gamma**t, rho.expand(4))
        torch.testing.assert_close(layer.attn.v.weight, src.layers[i].attn.v.weight)
    x = torch.randn(1, 3, 32, 32)
    src.load_state_dict(dst.state_dict())
    torch.testing.assert_close(dst(x)[0], src(x)[0])


def test_builds_from_mm_registries():
    from mmdet.registry import MODELS as DET_MODELS
    from mmseg.registry import MODELS as SEG_MODELS
    register_scope('mmseg')
    register_scope('mmdet')
    with DefaultScope.overwrite_default_scope('mmseg'):
        model = SEG_MODELS.build(dict(type='mmhybrid.InfViT', arch=TINY,
                                      patch_size=8, out_indices=(0, 1, 2)))
        neck = SEG_MODELS.build(dict(type='MultiLevelNeck', in_channels=[32] * 3,
                                     out_channels=16, scales=[4, 2, 1]))
        outs = neck(model(torch.randn(1, 3, 64, 64)))
        assert [o.shape[-1] for o in outs] == [32, 16, 8]
    with DefaultScope.overwrite_default_scope('mmdet'):
        model = DET_MODELS.build(dict(type='InfViT', arch=TINY, patch_size=16))
        neck = DET_MODELS.build(dict(type='mmhybrid.SimpleFeaturePyramid',
                                     in_channels=32, out_channels=16,
                                     num_outs=5))
        outs = neck(model(torch.randn(2, 3, 96, 64)))
        assert [tuple(o.shape[-2:]) for o in outs] == [
            (24, 16), (12, 8), (6, 4), (3, 2), (2, 1)]
        sum(o.sum() for o in outs).backward()
