"""ImageNet weights users hold, in the layouts they come in, into our backbones.

The source models are the real ones of the installed packages (mmpretrain's and
mmseg's ``VisionTransformer`` / ``SwinTransformer``, timm's ``VisionTransformer``
and ``SwinTransformer``) with random weights, saved as those packages save them
and loaded through ``init_cfg=dict(type='Pretrained', ...)``. Where the function
is the same (a ViT without history, Swin's attention with linear merging), the
outputs must agree. Layouts whose code is not installable (official Swin, CSWin,
DeiT-III, the InfSA authors' ViT) are built with their exact key names.
"""
import logging
import re
from pathlib import Path

import pytest
import torch
from mmengine.logging import MMLogger
from mmengine.registry import DefaultScope

import mmhybrid  # noqa: F401  (registers ours)
from mmhybrid.models.backbones import CSWin, HAViT, InfViT, SwinELFATT
from mmhybrid.models.utils import (convert_swin, detect_format, load_pretrained,
                                   resize_pos_embed, resize_rel_pos_bias_table)
from mmhybrid.utils import register_scope
from tests.models.test_elfatt_convert import CSWIN, SWIN, official_cswin, official_swin

ROOT = Path(__file__).resolve().parents[2]
TINY_VIT = dict(embed_dims=32, depth=2, num_heads=2, mlp_ratio=4.)
TINY_SWIN = dict(embed_dims=16, depths=(2, 2, 2, 2), num_heads=(2, 2, 4, 4))


class Reports(logging.Handler):
    """The load reports our loader logs."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        if ': loaded ' in record.getMessage():
            self.lines.append(record.getMessage())


@pytest.fixture
def reports():
    logger = MMLogger.get_current_instance()
    handler = Reports()
    logger.addHandler(handler)
    yield handler.lines
    logger.removeHandler(handler)


def perturbed(model, scale=0.1):
    """Every parameter moved off its initial value (no two tensors alike, unit
    LayerNorms no longer neutral), in eval mode."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * scale)
    model.eval()
    return model


def pretrained(cls, path, **kwargs):
    """``cls`` initialised from ``path`` through init_cfg, in eval mode."""
    model = cls(init_cfg=dict(type='Pretrained', checkpoint=str(path)),
                drop_path_rate=0., **kwargs)
    model.init_weights()
    model.eval()
    return model


def report_parts(line):
    """loaded, total, format, missing / unexpected / mismatched counts."""
    loaded, total = map(int, re.search(r'loaded (\d+)/(\d+)', line).groups())
    fmt = re.search(r'\((\S+) format, converted\)', line)
    counts = {name: int(re.search(rf'{name} (\d+)', line).group(1))
              for name in ('missing', 'unexpected', r'\(checkpoint vs model\)')}
    return loaded, total, fmt and fmt.group(1), counts


def exact_line(model, path, fmt, skipped=''):
    n = len(model.state_dict())
    return (f'{type(model).__name__}: loaded {n}/{n} tensors from {path} ({fmt} '
            'format, converted); missing 0; unexpected 0; shape-mismatched '
            f'(checkpoint vs model) 0{skipped}')


def mmpretrain_model(cfg):
    register_scope('mmpretrain')
    from mmpretrain.registry import MODELS
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(cfg)


def vit_classifier(arch, img_size, patch_size=16):
    """An mmpretrain ImageClassifier around its VisionTransformer."""
    width = arch if isinstance(arch, dict) else None
    dims = width['embed_dims'] if width else 192
    return perturbed(mmpretrain_model(dict(
        type='ImageClassifier',
        backbone=dict(type='VisionTransformer', arch=arch, img_size=img_size,
                      patch_size=patch_size, drop_path_rate=0.,
                      out_type='featmap'),
        head=dict(type='VisionTransformerClsHead', num_classes=10,
                  in_channels=dims))))


def save_mmengine(model, path):
    """As mmengine's Runner writes it (weights-only parts)."""
    torch.save({'meta': {'epoch': 1}, 'state_dict': model.state_dict()}, path)
    return path


MMPRETRAIN_TINY = dict(embed_dims=32, num_layers=2, num_heads=2,
                       feedforward_channels=128)


# ----------------------------------------------------------------- ViT family
@pytest.mark.parametrize('ours', ['HAViT', 'InfViT'])
def test_mmpretrain_deit_tiny_loads_fully_and_equals_deit(ours, tmp_path, reports):
    """Regression: mmpretrain 1.2.0 DeiT-T (ln1/ln2/ffn.layers names, final ln1)
    loaded 52/150 and was refused."""
    clf = vit_classifier('deit-tiny', 224)
    path = save_mmengine(clf, tmp_path / 'deit-t_mmpretrain.pth')
    if ours == 'HAViT':  # history=None: the plain ViT baseline
        model = pretrained(HAViT, path, arch='deit-t', history=None,
                           out_type='featmap')
    else:
        model = pretrained(InfViT, path, arch=dict(
            embed_dims=192, depth=12, num_heads=3, mlp_ratio=4., attn_types='S'))
    assert len(model.state_dict()) == 150
    assert reports == [exact_line(model, path, 'openmmlab-vit')]
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(model(x)[0], clf.backbone(x)[0],
                                   rtol=0, atol=1e-5)
    # with history on (HAViT's default) every tensor still loads: history
    # has no parameters
    if ours == 'HAViT':
        with_history = pretrained(HAViT, path, arch='deit-t')
        assert reports[-1] == exact_line(with_history, path, 'openmmlab-vit')


def test_mmpretrain_layer_scale_loads_and_equals(tmp_path, reports):
    """mmpretrain's layer scale (``attn.gamma1.weight``, ``ffn.gamma2.weight``)."""
    src = perturbed(mmpretrain_model(dict(
        type='VisionTransformer', arch=MMPRETRAIN_TINY, img_size=32, patch_size=8,
        layer_scale_init_value=0.1, out_type='featmap')))
    path = tmp_path / 'vit_ls.pth'
    torch.save({'state_dict': {f'backbone.{k}': v
                               for k, v in src.state_dict().items()}}, path)
    model = pretrained(HAViT, path, arch=TINY_VIT, history=None, img_size=32,
                       patch_size=8, out_type='featmap', layer_scale_init_value=1.)
    assert reports == [exact_line(model, path, 'openmmlab-vit')]
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(x)[0], src(x)[0], rtol=0, atol=1e-5)


def test_mmseg_vit_fused_attention_loads(tmp_path, reports):
    """mmseg's ViT keeps nn.MultiheadAttention's in_proj / out_proj and has no
    patch-embedding bias (a zero one is its function); its LayerNorms have
    eps 1e-5 (ours 1e-6: the config sets it)."""
    register_scope('mmseg')
    from mmseg.models.backbones import VisionTransformer as MMSegViT
    src = MMSegViT(img_size=32, patch_size=8, embed_dims=32, num_layers=2,
                   num_heads=2, mlp_ratio=4, final_norm=True, out_indices=-1,
                   drop_path_rate=0., with_cls_token=True, output_cls_token=False)
    perturbed(src)
    path = tmp_path / 'mmseg_vit.pth'
    torch.save({'state_dict': {f'backbone.{k}': v
                               for k, v in src.state_dict().items()}}, path)
    model = pretrained(HAViT, path, arch=TINY_VIT, history=None, img_size=32,
                       patch_size=8, out_type='featmap',
                       norm_cfg=dict(type='LN', eps=1e-5))
    assert reports == [exact_line(model, path, 'openmmlab-vit',
                                  '; zero patch_embed bias (the checkpoint has none)')]
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(x)[0], src(x)[0], rtol=0, atol=1e-5)


def timm_vit(**kwargs):
    from timm.models.vision_transformer import VisionTransformer
    return perturbed(VisionTransformer(img_size=32, patch_size=8, embed_dim=32,
                                       depth=2, num_heads=2, num_classes=5,
                                       **kwargs))


def timm_patch_tokens(model, x):
    """timm's normed patch tokens as a (B, C, H, W) map."""
    tokens = model.forward_features(x)[:, model.num_prefix_tokens:]
    B, N, C = tokens.shape
    side = int(N**0.5)
    return tokens.transpose(1, 2).reshape(B, C, side, side)


@pytest.mark.parametrize('variant', ['deit', 'deit3'])
def test_timm_vit_is_official_deit_and_equals_it(variant, tmp_path, reports):
    """timm's layout is the official DeiT one (facebookresearch/deit builds on
    timm); DeiT-III adds layer scale and gives the class token no position
    embedding (``no_embed_class``): a zero slot is the same function."""
    kwargs = dict(no_embed_class=True, init_values=1e-1) if variant == 'deit3' else {}
    src = timm_vit(**kwargs)
    path = tmp_path / 'deit.pth'
    torch.save({'model': src.state_dict(), 'epoch': 300}, path)  # DeiT's main.py
    scale = dict(layer_scale_init_value=1.) if variant == 'deit3' else {}
    model = pretrained(HAViT, path, arch=TINY_VIT, history=None, img_size=32,
                       patch_size=8, out_type='featmap', **scale)
    note = '; pos_embed given a zero class-token slot' if variant == 'deit3' else ''
    assert reports == [exact_line(model, path, 'timm-vit',
                                  '; skipped 2 non-backbone (head.weight, head.bias)'
                                  + note)]
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(x)[0], timm_patch_tokens(src, x),
                                   rtol=0, atol=1e-5)


def test_official_deit3_layout_equals_timm_deit3(tmp_path, reports):
    """facebookresearch/deit models_v2.py: ``blocks.i.gamma_1/gamma_2`` instead
    of timm's ``ls1.gamma``; otherwise timm's keys and function."""
    src = timm_vit(no_embed_class=True, init_values=1e-1)
    official = {re.sub(r'\.ls([12])\.gamma$', r'.gamma_\1', k): v
                for k, v in src.state_dict().items()}
    assert 'blocks.0.gamma_1' in official and 'blocks.0.ls1.gamma' not in official
    path = tmp_path / 'deit_3_small_224_1k.pth'
    torch.save({'model': official}, path)
    model = pretrained(HAViT, path, arch=TINY_VIT, history=None, img_size=32,
                       patch_size=8, out_type='featmap', layer_scale_init_value=1.)
    loaded, total, fmt, counts = report_parts(reports[-1])
    assert (loaded, fmt) == (total, 'timm-vit') and not any(counts.values())
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(x)[0], timm_patch_tokens(src, x),
                                   rtol=0, atol=1e-5)


def test_distilled_deit_drops_its_distillation_token(tmp_path, reports):
    from timm.models.deit import VisionTransformerDistilled
    src = VisionTransformerDistilled(img_size=32, patch_size=8, embed_dim=32,
                                     depth=2, num_heads=2, num_classes=5)
    path = tmp_path / 'deit_distilled.pth'
    torch.save({'model': src.state_dict()}, path)
    model = pretrained(HAViT, path, arch=TINY_VIT, img_size=32, patch_size=8)
    line, = reports
    loaded, total, fmt, counts = report_parts(line)
    assert (loaded, fmt) == (total, 'timm-vit') and not any(counts.values())
    assert 'skipped 4 non-backbone (head, head_dist)' in line
    assert 'distillation token dropped' in line
    sd = src.state_dict()
    torch.testing.assert_close(model.pos_embed[:, 0], sd['pos_embed'][:, 0])
    torch.testing.assert_close(model.pos_embed[:, 1:], sd['pos_embed'][:, 2:])


def infsa_authors_layout(depth=2, dims=32, grid=4, patch=8, rho_logit=1.5):
    """giorgioroffo/infinite-self-attention examples/custom_transformer.py's
    ImageClassifier: Conv2d patch_embed, cls_token, pos_embed, encoder.layers.i.
    {norm1, norm2, attn.{q,k,v,out}_proj, attn.rho_logit (a scalar), ff.0, ff.3},
    encoder.norm, head. Its InfSAAttention always has its own k_proj."""
    sd = {'patch_embed.weight': torch.randn(dims, 3, patch, patch),
          'patch_embed.bias': torch.randn(dims), 'cls_token': torch.randn(1, 1, dims),
          'pos_embed': torch.randn(1, 1 + grid * grid, dims),
          'encoder.norm.weight': torch.randn(dims),
          'encoder.norm.bias': torch.randn(dims),
          'head.weight': torch.randn(10, dims), 'head.bias': torch.randn(10)}
    for i in range(depth):
        pre = f'encoder.layers.{i}.'
        for name in ('q_proj', 'k_proj', 'v_proj', 'out_proj'):
            sd[f'{pre}attn.{name}.weight'] = torch.randn(dims, dims)
            sd[f'{pre}attn.{name}.bias'] = torch.randn(dims)
        sd[f'{pre}attn.rho_logit'] = torch.tensor(rho_logit)
        for name in ('norm1', 'norm2'):
            sd[f'{pre}{name}.weight'] = torch.randn(dims)
            sd[f'{pre}{name}.bias'] = torch.randn(dims)
        sd[f'{pre}ff.0.weight'] = torch.randn(4 * dims, dims)
        sd[f'{pre}ff.0.bias'] = torch.randn(4 * dims)
        sd[f'{pre}ff.3.weight'] = torch.randn(dims, 4 * dims)
        sd[f'{pre}ff.3.bias'] = torch.randn(dims)
    return sd


INFSA_TINY = dict(embed_dims=32, depth=2, num_heads=4, mlp_ratio=4.,
                  attn_types='L')


def test_infsa_untied_checkpoint_into_tied_model_is_refused(tmp_path, reports):
    """Regression: the authors' k_proj was dropped while the log said 51/51."""
    path = tmp_path / 'linear_infvit.pth'
    torch.save(infsa_authors_layout(), path)
    with pytest.raises(ValueError, match=r'layers \[0, 1\].*tie_qk=False'):
        pretrained(InfViT, path, arch=INFSA_TINY, img_size=32, patch_size=8)
    assert reports == []


@pytest.mark.parametrize('attn_types', ['L', 'P'])
def test_infsa_authors_checkpoint_loads_untied(attn_types, tmp_path, reports):
    sd = infsa_authors_layout()
    path = tmp_path / 'infvit.pth'
    torch.save(sd, path)
    model = pretrained(InfViT, path, arch=dict(INFSA_TINY, attn_types=attn_types),
                       img_size=32, patch_size=8, tie_qk=False)
    assert reports == [exact_line(model, path, 'infsa',
                                  '; skipped 2 non-backbone (head.weight, head.bias)')]
    for i, layer in enumerate(model.layers):
        pre = f'encoder.layers.{i}.'
        for ours, theirs in (('q', 'q_proj'), ('k', 'k_proj'), ('v', 'v_proj'),
                             ('proj', 'out_proj')):
            assert torch.equal(getattr(layer.attn, ours).weight,
                               sd[f'{pre}attn.{theirs}.weight'])
        assert torch.equal(layer.ffn.fc1.weight, sd[f'{pre}ff.0.weight'])
        assert torch.equal(layer.ffn.fc2.bias, sd[f'{pre}ff.3.bias'])
        torch.testing.assert_close(layer.attn.gamma,
                                   torch.sigmoid(torch.tensor(1.5)).expand(4))
    assert torch.equal(model.norm1.weight, sd['encoder.norm.weight'])
    assert torch.equal(model.patch_embed.projection.weight, sd['patch_embed.weight'])


def test_softmax_vit_into_infsa_layers_splits_qkv(tmp_path, reports):
    """DeiT weights into an InfViT with InfSA layers: InfSA's own rule takes q,
    k, v from the fused projection (an initialisation); a tied model drops k,
    and the line says so."""
    src = timm_vit()
    path = tmp_path / 'deit.pth'
    torch.save({'model': src.state_dict()}, path)
    model = pretrained(InfViT, path, arch=dict(TINY_VIT, attn_types='SP'),
                       img_size=32, patch_size=8)
    line, = reports
    loaded, total, fmt, counts = report_parts(line)
    # the pure layer's discount gamma is new, at gamma_init
    assert not any(counts.values()) and 'new 1 (how each starts' in line
    assert loaded == total - 1 and 'PureInfSA (q, k, v, proj; new gamma_logit' in line
    qkv = src.state_dict()['blocks.1.attn.qkv.weight']
    assert torch.equal(model.layers[1].attn.k.weight, qkv[32:64])
    tied = pretrained(InfViT, path, arch=dict(TINY_VIT, attn_types='SL'),
                      img_size=32, patch_size=8)
    assert tied.layers[1].attn.k is None
    assert torch.equal(tied.layers[1].attn.v.weight, qkv[64:])
    assert 'dropped k.weight, k.bias (tied Q = K)' in reports[-1]


# ---------------------------------------------------- resolution and patch size
@pytest.mark.parametrize('grid, extra', [((32, 32), 1), ((64, 64), 1), ((24, 40), 0)])
def test_pos_embed_resize_matches_mmpretrain(grid, extra):
    from mmpretrain.models.utils import resize_pos_embed as mmpretrain_resize
    pos = torch.randn(1, extra + 14 * 14, 24)
    ours = resize_pos_embed(pos, (14, 14), grid, num_extra_tokens=extra)
    theirs = mmpretrain_resize(pos, (14, 14), grid, mode='bicubic',
                               num_extra_tokens=extra)
    assert ours.shape == (1, extra + grid[0] * grid[1], 24)
    torch.testing.assert_close(ours, theirs)


@pytest.mark.parametrize('src, dst', [((14, 14), (32, 40)), ((7, 9), (3, 5)),
                                      ((13, 13), (13, 13)), ((5, 6), (23, 2))])
def test_bicubic_matrices_equal_interpolate_in_float64(src, dst):
    """The matrices of the resample (exported as MatMuls) are PyTorch's bicubic
    ``F.interpolate`` (align_corners=False) up and down, at odd and equal sizes."""
    from torch.nn.functional import interpolate
    from mmhybrid.ops.pos_embed import _bicubic
    values = torch.randn(src[0] * src[1], 5, dtype=torch.float64)
    grid = values.T.reshape(1, 5, *src)
    ref = interpolate(grid, size=dst, mode='bicubic', align_corners=False)
    ours = _bicubic(values, src, dst)
    assert ours.dtype == torch.float64
    torch.testing.assert_close(ours, ref[0].flatten(1).T, rtol=0, atol=1e-12)


def test_fine_tune_at_another_resolution_equals_mmpretrain(tmp_path, reports):
    """A 32^2 checkpoint into a 64^2 model: the stored embedding is resized as
    mmpretrain resizes it when it loads the same file, and the models agree."""
    clf = vit_classifier(MMPRETRAIN_TINY, 32, patch_size=8)
    path = save_mmengine(clf, tmp_path / 'vit32.pth')
    model = pretrained(HAViT, path, arch=TINY_VIT, history=None, img_size=64,
                       patch_size=8, out_type='featmap')
    assert reports[-1].endswith('; pos_embed resized from 4x4 to 8x8')
    big = vit_classifier(MMPRETRAIN_TINY, 64, patch_size=8)
    big.load_state_dict(torch.load(path)['state_dict'])  # its resize hook
    torch.testing.assert_close(model.pos_embed, big.backbone.pos_embed)
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x)[0], big.backbone(x)[0],
                                   rtol=0, atol=1e-5)


def test_other_patch_size_is_a_clear_error(tmp_path):
    clf = vit_classifier(MMPRETRAIN_TINY, 32, patch_size=8)
    path = save_mmengine(clf, tmp_path / 'vit_p8.pth')
    with pytest.raises(ValueError, match='8x8 kernel.*patch_size=8'):
        pretrained(HAViT, path, arch=TINY_VIT, img_size=32, patch_size=16)


def test_non_square_position_grid_is_a_clear_error(tmp_path):
    """A checkpoint trained on 192x256 inputs (12x16 patches) has no square
    grid to infer: the message says to build the model with its img_size."""
    sd = timm_vit().state_dict()
    sd['pos_embed'] = torch.randn(1, 1 + 12 * 16, 32)
    path = tmp_path / 'vit_192x256.pth'
    torch.save({'model': sd}, path)
    with pytest.raises(ValueError, match='192 to 16 grid tokens.*img_size'):
        pretrained(HAViT, path, arch=TINY_VIT, img_size=32, patch_size=8)


# ------------------------------------------------------------- Swin family
def mmpretrain_swin():
    return perturbed(mmpretrain_model(dict(
        type='SwinTransformer', arch=dict(TINY_SWIN), img_size=128, window_size=2,
        drop_path_rate=0., out_indices=(0, 1, 2, 3))))


def mmseg_swin(window=2, **kwargs):
    register_scope('mmseg')
    from mmseg.models.backbones import SwinTransformer
    model = SwinTransformer(pretrain_img_size=128, window_size=window,
                            drop_path_rate=0., out_indices=(0, 1, 2, 3),
                            **TINY_SWIN, **kwargs)
    return perturbed(model)


def timm_swin():
    from timm.models.swin_transformer import SwinTransformer
    return perturbed(SwinTransformer(
        img_size=128, patch_size=4, embed_dim=16, depths=(2, 2, 2, 2),
        num_heads=(2, 2, 4, 4), window_size=2, num_classes=5, drop_path_rate=0.))


def swin_local(path, **kwargs):
    kwargs = dict(dict(out_indices=(0, 1, 2, 3), window_size=2), **kwargs)
    return pretrained(SwinELFATT, path, arch=TINY_SWIN, attn='local',
                      downsample='linear', **kwargs)


@pytest.mark.parametrize('source', ['mmpretrain', 'mmseg'])
def test_openmmlab_swin_equals_source(source, tmp_path, reports):
    """Same function: at 128^2 every stage map (32..4) is a multiple of the
    window (2) and larger than it, where all implementations shift alike."""
    src = mmpretrain_swin() if source == 'mmpretrain' else mmseg_swin()
    path = tmp_path / 'swin.pth'
    torch.save({'state_dict': {f'backbone.{k}': v
                               for k, v in src.state_dict().items()}}, path)
    model = swin_local(path)
    buffers = sum(k.endswith('relative_position_index') for k in src.state_dict())
    assert reports == [exact_line(
        model, path, 'openmmlab-swin', f'; skipped {buffers} non-backbone '
        f'(stages.*.blocks.*.attn.w_msa.relative_position_index x{buffers})')]
    x = torch.randn(1, 3, 128, 128)
    with torch.no_grad():
        for ours, theirs in zip(model(x), src(x)):
            torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)


def official_from_timm(state_dict, window=2):
    """microsoft/Swin-Transformer's layout of a timm Swin: merges at the end of
    stages 0-2 (timm's checkpoint_filter_fn moves them the other way), ``head``,
    and the buffers the official code saves."""
    out = {}
    for k, v in state_dict.items():
        m = re.match(r'layers\.(\d+)\.downsample\.(.*)', k)
        k = f'layers.{int(m.group(1)) - 1}.downsample.{m.group(2)}' if m else k
        out[k.replace('head.fc.', 'head.')] = v
        if k.endswith('relative_position_bias_table'):
            out[k.replace('bias_table', 'index')] = torch.zeros(
                window**2, window**2, dtype=torch.long)
    return out


@pytest.mark.parametrize('source', ['timm', 'official'])
def test_timm_and_official_swin_equal_source(source, tmp_path, reports):
    src = timm_swin()
    sd = src.state_dict()
    if source == 'official':
        sd = official_from_timm(sd)
        assert 'layers.0.downsample.reduction.weight' in sd
    path = tmp_path / 'swin_tiny_patch4_window7_224.pth'
    torch.save({'model': sd}, path)
    assert detect_format(sd).name == ('swin' if source == 'official' else 'timm-swin')
    model = swin_local(path, out_indices=(3, ))
    line, = reports
    loaded, total, fmt, counts = report_parts(line)
    assert (loaded, fmt) == (total, detect_format(sd).name)
    assert not any(counts.values())
    x = torch.randn(1, 3, 128, 128)
    with torch.no_grad():
        theirs = src.forward_features(x).permute(0, 3, 1, 2)
        torch.testing.assert_close(model(x)[0], theirs, rtol=0, atol=1e-5)


def test_window_resize_matches_mmseg(tmp_path, reports):
    """Swin weights of window 2 into window 4: the relative-position-bias tables
    are resized as mmseg's Swin resizes them loading the same file."""
    src = mmseg_swin(window=2)
    path = tmp_path / 'swin_w2.pth'
    # without the index buffers: mmseg's own loader refuses their other shape
    torch.save({'state_dict': {k: v for k, v in src.state_dict().items()
                               if not k.endswith('relative_position_index')}}, path)
    mmseg = mmseg_swin(window=4, init_cfg=dict(type='Pretrained',
                                               checkpoint=str(path)))
    mmseg.init_weights()
    model = swin_local(path, window_size=4)
    assert reports[-1].endswith(
        '; from softmax layers: ShiftedWindowAttention (qkv, proj; '
        'relative_position_bias_table resized from window 2 to 4) x8')
    theirs = mmseg.state_dict()
    for name, value in model.state_dict().items():
        if name.endswith('relative_position_bias_table'):
            mmseg_name = name.replace('.attn.', '.attn.w_msa.')
            torch.testing.assert_close(value, theirs[mmseg_name])
    table = torch.randn(9, 3)
    assert torch.equal(resize_rel_pos_bias_table(table, 2), table)
    torch.testing.assert_close(resize_rel_pos_bias_table(torch.ones(9, 3), 7),
                               torch.ones(169, 3))


PLANS = ['local', 'elfatt', 'effatt', 'global', 'L,L,GE,G']


@pytest.mark.parametrize('plan', PLANS)
def test_swin_weights_into_every_attention_plan(plan, tmp_path, reports):
    """An official Swin checkpoint into each plan goes through each mixer's
    rule: every block's qkv, proj, norms and MLP copied; the LePE convs of
    non-local blocks new at zero, their bias tables dropped (counted and named);
    the per-stage output norms missing (official Swin has one final norm)."""
    path = tmp_path / 'swin.pth'
    sd = official_swin(SWIN)
    torch.save({'model': sd}, path)
    model = pretrained(SwinELFATT, path, arch=SWIN, attn=plan, window_size=4,
                       block_sizes=(4, 4, 16, 4), downsample='linear')
    line, = reports
    non_local = [f'stages.{i}.blocks.{j}.attn.' for i, stage in enumerate(model.mixers)
                 for j, kind in enumerate(stage) if kind != 'shifted_window']
    new = {p + 'lepe.' + w for p in non_local for w in ('weight', 'bias')}
    missing = {f'norm{i}.{w}' for i in range(3) for w in ('weight', 'bias')}
    own = model.state_dict()
    assert new <= set(own) and all(not own[k].any() for k in new)
    loaded, total, fmt, counts = report_parts(line)
    assert (loaded, total, fmt) == (len(own) - len(missing) - len(new), len(own),
                                    'swin')
    assert counts == {'missing': len(missing), 'unexpected': 0,
                      r'\(checkpoint vs model\)': 0}
    assert (f'dropping {len(non_local)} of' in line) == bool(non_local)
    assert (f'new {len(new)} ' in line) == bool(new)
    converted = convert_swin(sd)
    for key, value in own.items():
        if key in converted and 'lepe' not in key:
            assert torch.equal(value, converted[key]), key


# ------------------------------------------------------------------- CSWin
def test_official_cswin_output_norms_are_reported_new(tmp_path, reports):
    """Regression: the official classifier has one final ``norm`` (our norm3);
    norm0..2 of a dense-prediction model are new and listed as missing (the
    official segmentation backbone also starts them from scratch)."""
    path = tmp_path / 'cswin_tiny_224.pth'
    torch.save({'state_dict_ema': official_cswin(CSWIN)}, path)
    model = pretrained(CSWin, path, arch=CSWIN, attn='local')
    n = len(model.state_dict())
    assert reports == [
        f'CSWin: loaded {n - 6}/{n} tensors from {path} (cswin format, converted); '
        'missing 6 (norm0, norm1, norm2); unexpected 0; shape-mismatched '
        '(checkpoint vs model) 0; skipped 2 non-backbone (head.weight, head.bias)']
    classifier = pretrained(CSWin, path, arch=CSWIN, attn='local', out_indices=(3, ))
    assert reports[-1].startswith(f'CSWin: loaded {len(classifier.state_dict())}/'
                                  f'{len(classifier.state_dict())} tensors')
    assert 'missing 0; unexpected 0' in reports[-1]


def test_official_cswin_segmentation_checkpoint_loads_its_norms(tmp_path, reports):
    """segmentation/backbone/cswin_transformer.py names its output norms
    norm1..norm4; an UPerNet checkpoint carries them under backbone."""
    sd = official_cswin(CSWIN)
    sd.pop('norm.weight'), sd.pop('norm.bias'), sd.pop('head.weight'), sd.pop('head.bias')
    for s in range(1, 5):
        sd[f'norm{s}.weight'] = torch.randn(16 * 2**(s - 1))
        sd[f'norm{s}.bias'] = torch.randn(16 * 2**(s - 1))
    path = tmp_path / 'upernet_cswin.pth'
    torch.save({'state_dict': {f'backbone.{k}': v for k, v in sd.items()}}, path)
    model = pretrained(CSWin, path, arch=CSWIN, attn='elfatt', block_sizes=(4, 4, 16, 4))
    assert reports == [exact_line(model, path, 'cswin')]
    assert torch.equal(model.norm0.weight, sd['norm1.weight'])


def test_wrong_family_names_the_format(tmp_path):
    path = tmp_path / 'swin.pth'
    torch.save({'model': official_swin(SWIN)}, path)
    with pytest.raises(ValueError, match='swin checkpoint .*into SwinELFATT, '
                       'SoLAVision, not CSWin. Pairs we support: Swin-T'):
        pretrained(CSWin, path, arch=CSWIN)


def test_report_never_hides_a_dropped_tensor(tmp_path, reports):
    """'loaded N/N' with tensors left over says how many it dropped."""
    src = timm_vit()
    sd = dict(src.state_dict(), **{'reg_token': torch.zeros(1, 4, 32)})
    path = tmp_path / 'vit_reg.pth'
    torch.save(sd, path)
    pretrained(HAViT, path, arch=TINY_VIT, img_size=32, patch_size=8)
    line, = reports
    assert re.search(r'loaded (\d+)/\1 tensors from \S+ \(timm-vit format, '
                     r'converted\), dropping 1 of its \d+ backbone tensors; '
                     r'missing 0; unexpected 1 \(reg_token\)', line)


# ------------------------------------------------- SoLA: our in1k weights chain
def test_sola_in1k_pretraining_then_upernet_fine_tune(toy_data, tmp_path):
    """No public SoLA weights exist: our in1k config makes them. Pretrain a few
    iterations on generated ImageNet-layout data, then fine-tune UPerNet from
    the classifier checkpoint (prefix='backbone.') and start Mask R-CNN from it:
    every backbone tensor of the classifier loads; only the output norms of
    stages the classifier does not return (norm0..2) are new."""
    from tests._tiny_toy_config import SOLA, write_tiny_toy_config
    from tests._toy_runner import build_toy_runner, toy_config

    from tools._common import build_runner, load_config, set_data_root
    cfg = toy_config(ROOT / 'configs/sola/sola-t_in1k.py', toy_data,
                     tmp_path / 'in1k', iters=2, validate=False)
    cfg.model.backbone.arch = SOLA['arch']
    cfg.model.backbone.update(head_dim=SOLA['head_dim'], drop_path_rate=0.)
    cfg.model.head.in_channels = SOLA['arch']['embed_dims'][-1]
    # the checkpoint hook of our config bases writes the weights-only form
    cfg.default_hooks.checkpoint = dict(type='mmhybrid.AtomicCheckpointHook')
    runner = build_toy_runner(cfg, iters=2)
    runner.train()
    runner.save_checkpoint(str(tmp_path), 'sola_in1k.pth')
    checkpoint = tmp_path / 'sola_in1k.pth'
    classifier = {k[len('backbone.'):] for k in torch.load(
        checkpoint, weights_only=True)['state_dict'] if k.startswith('backbone.')}

    # the in1k configs train with the Hidden State Bridge (Table 6), as the
    # upernet_sola-*-hsb configs use it
    init = (f"\nmodel['backbone'].update(with_hsb=True, init_cfg=dict("
            f"type='Pretrained', checkpoint={str(checkpoint)!r}, "
            "prefix='backbone.'))\n")
    seg_cfg = load_config(str(write_tiny_toy_config(tmp_path, 1, extra=init)),
                          work_dir=str(tmp_path / 'upernet'))
    set_data_root(seg_cfg, toy_data['ade'])
    seg_cfg.val_dataloader = seg_cfg.val_cfg = seg_cfg.val_evaluator = None
    seg_cfg.default_hooks.checkpoint = None
    seg = build_runner(seg_cfg)
    handler = Reports()  # the runner's logger is the current one now
    MMLogger.get_current_instance().addHandler(handler)
    try:
        seg.train()
    finally:
        MMLogger.get_current_instance().removeHandler(handler)
    line, = [r for r in handler.lines if r.startswith('SoLAVision:')]
    own = seg.model.backbone.state_dict()
    new = sorted(set(own) - classifier)
    assert new == [f'norm{i}.{w}' for i in range(3) for w in ('bias', 'weight')]
    n = len(own)
    assert line.startswith(
        f'SoLAVision: loaded {n - 6}/{n} tensors from {checkpoint}; missing 6 '
        '(norm0, norm1, norm2); unexpected 0; shape-mismatched (checkpoint vs '
        'model) 0')

    # the Mask R-CNN config starts from the same file, with the same report
    from mmdet.registry import MODELS as DET_MODELS
    det_cfg = load_config(ROOT / 'configs/sola/demo/mask-rcnn_sola-t_fpn_toy-coco.py')
    det_cfg.model.backbone.update(
        arch=SOLA['arch'], head_dim=SOLA['head_dim'], with_hsb=True,
        init_cfg=dict(type='Pretrained', checkpoint=str(checkpoint),
                      prefix='backbone.'))
    det_cfg.model.neck.in_channels = list(SOLA['arch']['embed_dims'])
    detector = DET_MODELS.build(det_cfg.model)
    handler = Reports()
    MMLogger.get_current_instance().addHandler(handler)
    try:
        detector.init_weights()
    finally:
        MMLogger.get_current_instance().removeHandler(handler)
    det_line, = [r for r in handler.lines if r.startswith('SoLAVision:')]
    assert det_line == line


def test_checkpoint_of_another_width_names_both_widths(tmp_path):
    """DeiT-T (192 wide) into InfViT or HAViT-S: the inheritance names the stage
    and both widths (and the pairs it supports)."""
    deit_t = HAViT(arch='deit-t', img_size=32, patch_size=16)
    path = tmp_path / 'deit-t.pth'
    torch.save({'state_dict': {f'backbone.{k}': v
                               for k, v in deit_t.state_dict().items()}}, path)
    with pytest.raises(ValueError, match=r'stage 1: 768 channels, the teacher 192'):
        load_pretrained(InfViT(arch='linear-b', img_size=32), str(path))
    with pytest.raises(ValueError, match='stage 1: 384 channels, the teacher 192'):
        load_pretrained(HAViT(arch='deit-s', img_size=32), str(path))


def test_tied_model_takes_a_fused_qkv_and_says_k_is_dropped(tmp_path, reports):
    """A DeiT-style fused qkv into a tied linear InfViT: q and v by InfSA's own
    rule, the keys dropped (tied Q = K) and said so in the load line."""
    src = InfViT(arch=dict(TINY_VIT, attn_types='S'), img_size=32, patch_size=8)
    path = tmp_path / 'vit.pth'
    torch.save(src.state_dict(), path)
    model = InfViT(arch=dict(TINY_VIT, attn_types='L'), img_size=32, patch_size=8)
    load_pretrained(model, str(path))
    line, = reports
    assert 'k.weight, k.bias (tied Q = K)' in line, line
    q = src.layers[0].attn.qkv.weight.chunk(3)[0]
    assert torch.equal(model.layers[0].attn.q.weight, q)