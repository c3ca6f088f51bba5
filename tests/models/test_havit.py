"""Historical attention (HAViT) in the layers and backbones, and the HAViT arch."""
import pytest
import torch
from mmengine.registry import DefaultScope

import mmhybrid  # noqa: F401
from mmhybrid.layers import HistoricalAttention, MixerState
from mmhybrid.layers.mixers import SoftmaxAttention
from mmhybrid.models.backbones import HAViT, InfViT, SoLAVision, SwinELFATT
from mmhybrid.ops.historical_attention import naive_historical_attention
from mmhybrid.utils import register_scope
from tools.tiny_backbones import ARCHS

HISTORY = dict(alpha=0.45, init='random')
SOLA = dict(embed_dims=(16, 16, 32, 32), schedule='LL/LL/LSLS/LS',
            hsb_routes=(((1, 2), (3, 2)), ((3, 1), (4, 2))))
SWIN = ARCHS['SwinELFATT']
VIT = dict(embed_dims=32, depth=3, num_heads=4, mlp_ratio=2.)


def sola(**kwargs):
    model = SoLAVision(arch=SOLA, head_dim=8, drop_path_rate=0., **kwargs)
    model.init_weights()
    return model


def swin(**kwargs):
    model = SwinELFATT(arch=SWIN, attn='L,G,G,LG', window_size=4,
                       drop_path_rate=0., **kwargs)
    model.init_weights()
    return model


def vit(**kwargs):
    model = HAViT(arch=VIT, img_size=32, patch_size=8, drop_path_rate=0.,
                  **kwargs)
    model.init_weights()
    return model


BUILDERS = {'sola': sola, 'swin': swin, 'havit': vit}


def same_weights(model, **kwargs):
    """``model``'s builder with other kwargs and ``model``'s weights."""
    other = BUILDERS[model.builder](**kwargs)
    other.load_state_dict(model.state_dict())
    return other


def build(name, **kwargs):
    model = BUILDERS[name](**kwargs)
    model.builder = name
    return model


def historical_modules(model):
    return [m for m in model.modules() if isinstance(m, HistoricalAttention)]


# ---------------------------------------------------------------- the module
def test_fixed_initial_history_is_deterministic_and_batch_free():
    attn = HistoricalAttention(2, **HISTORY).eval()
    first = attn.initial_history(4, 10, torch.device('cpu'))
    assert first.shape == (1, 2, 10, 10)
    torch.manual_seed(123)  # the global RNG plays no part
    again = HistoricalAttention(2, **HISTORY).eval().initial_history(
        1, 10, torch.device('cpu'))
    torch.testing.assert_close(again, first, rtol=0, atol=0)
    assert 0.8 < first.std() < 1.2 and abs(first.mean()) < 0.2
    assert attn.initial_history(4, 11, torch.device('cpu')).shape[-1] == 11


def test_initial_history_in_training():
    attn = HistoricalAttention(2, **HISTORY).train()
    a, b = (attn.initial_history(3, 5, torch.device('cpu')) for _ in range(2))
    assert a.shape == (3, 2, 5, 5) and not torch.equal(a, b)  # per step, per sample
    fixed = HistoricalAttention(2, resample=False).train()
    torch.testing.assert_close(fixed.initial_history(3, 5, torch.device('cpu')),
                               attn.eval().initial_history(1, 5, torch.device('cpu')))
    assert HistoricalAttention(2, init='zero').initial_history(
        3, 5, torch.device('cpu')) is None


def test_module_errors():
    with pytest.raises(ValueError, match='alpha'):
        HistoricalAttention(2, alpha=-0.1)
    with pytest.raises(ValueError, match='init'):
        HistoricalAttention(2, init='normal')
    with pytest.raises(TypeError, match='history must be None or a dict'):
        SoftmaxAttention(8, 2, history=0.45)


# ---------------------------------------------------------------- the layers
def test_multihead_attention_matches_the_formula():
    torch.manual_seed(0)
    attn = SoftmaxAttention(16, 4, head_dim=6, history=HISTORY).eval()
    x = torch.randn(2, 9, 16)
    history = torch.randn(2, 4, 9, 9)
    out, state = attn(x, (3, 3), MixerState(history=history))
    new_history = state.history
    q, k, v = attn.qkv(x).view(2, 9, 3, 4, 6).permute(2, 0, 3, 1, 4)
    ref, ref_history = naive_historical_attention(q, k, v, history, 0.45)
    torch.testing.assert_close(out, attn.proj(ref.transpose(1, 2).reshape(2, 9, 24)))
    torch.testing.assert_close(new_history, ref_history)
    assert attn.qkv.weight.shape == (72, 16) and attn.proj.weight.shape == (16, 24)


def test_global_attention_with_history_alpha_one_is_plain():
    torch.manual_seed(0)
    plain = SoftmaxAttention(16, 2, lepe=True).eval()
    hist = SoftmaxAttention(16, 2, lepe=True, history=dict(alpha=1.)).eval()
    hist.load_state_dict(plain.state_dict())
    x = torch.randn(2, 12, 16)
    out, state = hist(x, (3, 4))
    new_history = state.history
    torch.testing.assert_close(out, plain(x, (3, 4))[0], rtol=1e-5, atol=1e-6)
    assert new_history.shape == (2, 2, 12, 12)


# ---------------------------------------------------------------- backbones
@pytest.mark.parametrize('name', sorted(BUILDERS))
def test_alpha_one_equals_the_plain_backbone(name):
    """With alpha = 1 the history is ignored: outputs equal those without it."""
    plain = build(name, history=None)
    model = same_weights(plain, history=dict(alpha=1.))
    assert historical_modules(model) and not historical_modules(plain)
    x = torch.randn(2, 3, 32, 40)
    for mode in ('eval', 'train'):
        getattr(plain, mode)(), getattr(model, mode)()
        torch.manual_seed(0)
        ref = plain(x)
        torch.manual_seed(0)
        for a, b in zip(model(x), ref):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('name', sorted(BUILDERS))
def test_eval_is_deterministic_and_batch_independent(name):
    model = build(name, history=HISTORY).eval()
    x = torch.randn(3, 3, 32, 40)
    with torch.no_grad():
        out = model(x)
        torch.manual_seed(5)
        again = model(x)
        single = model(x[1:2])
    for a, b, c in zip(out, again, single):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
        torch.testing.assert_close(a[1:2], c, rtol=1e-5, atol=1e-6)
    model.train()
    with torch.no_grad():  # the reference's behaviour, kept for training
        assert not torch.allclose(model(x)[-1], model(x)[-1])


def record_histories(model):
    """(mixer, history in, history out) of every historical attention call."""
    calls = []
    for m in model.modules():
        if getattr(m, 'historical', None) is not None:
            m.register_forward_hook(
                lambda mod, args, out: calls.append(
                    (mod, args[-1].history, out[1].history)))
    return calls


def test_sola_history_chains_within_a_stage_and_restarts():
    model = sola(history=HISTORY).eval()
    calls = record_histories(model)
    with torch.no_grad():
        model(torch.randn(1, 3, 64, 64))
    # 'LL/LL/LSLS/LS': stage 3 has a chain of two 'S' layers, stage 4 one
    (s31, in31, out31), (s32, in32, out32), (s41, in41, out41) = calls
    assert [m.historical.keep for m in (s31, s32, s41)] == [True, False, False]
    assert in31 is None and in41 is None  # each stage starts from H_0
    assert in32 is out31 and out31.shape == (1, 4, 16, 16)
    assert out32 is None and out41 is None  # nothing reads them: not built


def test_infvit_history_skips_other_layers_and_restarts_on_new_heads():
    model = InfViT(arch=dict(embed_dims=32, depth=5, num_heads=[4, 4, 2, 4, 2],
                             mlp_ratio=2., attn_types='SLSSS'),
                   img_size=32, patch_size=8, history=HISTORY).eval()
    assert [m.keep for m in historical_modules(model)] == [False, False, False,
                                                           False]
    model = InfViT(arch=dict(VIT, depth=4, attn_types='SLSS'), img_size=32,
                   patch_size=8, history=HISTORY).eval()
    calls = record_histories(model)
    with torch.no_grad():
        model(torch.randn(2, 3, 32, 32))
    assert calls[1][1] is calls[0][2] and calls[2][1] is calls[1][2]
    assert calls[0][2].shape == (2, 4, 17, 17)  # class token included


def test_with_cp_same_gradients_in_training():
    """H_0 is drawn inside the checkpointed layer from the global RNG, which
    checkpointing replays: recomputation sees the same H_0."""
    model = build('sola', history=HISTORY).train()
    cp = same_weights(model, history=HISTORY, with_cp=True).train()
    x = torch.randn(2, 3, 32, 32, requires_grad=True)
    results = []
    for m in (model, cp):
        torch.manual_seed(3)
        loss = sum((o * o).mean() for o in m(x))
        results.append(torch.autograd.grad(loss, [x] + list(m.parameters())))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_bf16_autocast_train_step():
    model = sola(history=HISTORY).train()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        outs = model(torch.randn(2, 3, 32, 32))
        loss = sum(o.float().mean() for o in outs)
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters()
               if p.grad is not None)


def test_backbone_errors():
    with pytest.raises(ValueError, match='needs softmax layers'):
        SoLAVision(arch=SOLA, schedule='LL/LL/LLLL/LL', history=HISTORY)
    with pytest.raises(ValueError, match='needs softmax blocks'):
        SwinELFATT(arch=SWIN, attn='local', history=HISTORY)
    with pytest.raises(ValueError, match='needs softmax layers'):
        InfViT(arch=dict(VIT, attn_types='L'), history=HISTORY)
    with pytest.raises(TypeError, match="attn_types is InfViT's spelling"):
        HAViT(arch=VIT, attn_types='L')
    with pytest.raises(ValueError, match='cls_token'):
        HAViT(arch=VIT, with_cls_token=False)
    with pytest.raises(KeyError, match='unknown HAViT arch'):
        HAViT(arch='vit-h')


# ---------------------------------------------------------------- HAViT arch
def test_paper_arch_widths():
    """banik-s/HAViT create_model.py: dim 192, 9 layers, 12 heads x 64, MLP 512,
    no qkv bias."""
    with torch.device('meta'):
        model = HAViT(arch='paper', img_size=32, patch_size=4)
    assert len(model.layers) == 9
    layer = model.layers[0]
    assert layer.attn.qkv.weight.shape == (3 * 768, 192)
    assert layer.attn.qkv.bias is None
    assert layer.ffn.fc1.weight.shape == (512, 192)
    assert model.pos_embed.shape == (1, 65, 192)


@pytest.mark.parametrize('arch,mmpretrain_arch', [('deit-t', 'deit-tiny'),
                                                  ('deit-s', 'deit-small'),
                                                  ('deit-b', 'deit-base')])
def test_deit_archs_match_mmpretrain(arch, mmpretrain_arch):
    from mmpretrain.models import VisionTransformer
    with torch.device('meta'):
        ours = HAViT(arch=arch)
        ref = VisionTransformer(arch=mmpretrain_arch)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(ours) == count(ref)


def test_classifier_trains_through_mmpretrain_registry():
    from mmpretrain.registry import MODELS as CLS_MODELS
    from mmpretrain.structures import DataSample
    register_scope('mmpretrain')
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = CLS_MODELS.build(dict(
            type='ImageClassifier',
            backbone=dict(type='mmhybrid.HAViT', arch=VIT, img_size=32,
                          patch_size=8),
            head=dict(type='VisionTransformerClsHead', num_classes=5,
                      in_channels=32)))
    model.init_weights()
    torch.nn.init.normal_(model.head.layers.head.weight)  # zero-initialised
    model.train()
    x = torch.randn(2, 3, 32, 32)
    feats = model.extract_feat(x)
    assert feats[-1].shape == (2, 32)
    samples = [DataSample().set_gt_label(i) for i in (1, 3)]
    losses = model.loss(x, samples)
    losses['loss'].backward()
    assert model.backbone.layers[0].attn.qkv.weight.grad.abs().sum() > 0


def test_out_types():
    model = vit(out_type='featmap', out_indices=(1, 2)).eval()
    x = torch.randn(2, 3, 32, 40)
    with torch.no_grad():
        maps = model(x)
        model.out_type = 'avg_featmap'
        pooled = model(x)
    assert [tuple(m.shape) for m in maps] == [(2, 32, 4, 5)] * 2
    for m, p in zip(maps, pooled):
        torch.testing.assert_close(p, m.mean((2, 3)))
