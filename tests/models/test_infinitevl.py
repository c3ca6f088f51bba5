"""G (bidirectional Gated DeltaNet) and W (sliding-window) layers, the layouts
of the hybrid backbone, and the InfiniteVL-style backbone."""
import functools

import pytest
import torch

import mmhybrid  # noqa: F401
from mmhybrid.layers import Block, ConvMlp, HiddenStateBridge, MixerState, build_mixer
from mmhybrid.layers.mixer_layout import letters_of
from mmhybrid.layers.mixers import (BidirectionalGatedDeltaNet, SlidingWindowAttention,
                                    SoftmaxAttention, SpatialMix)
from mmhybrid.models.backbones import InfiniteVLVision, SoLAVision
from mmhybrid.models.backbones.infinitevl_vision import block_schedule
from mmhybrid.registry import MODELS

DIMS = (16, 16, 32, 32)
ROUTES = (((1, 2), (3, 3)), ((2, 2), (3, 6)), ((3, 2), (4, 2)))
KINDS = {SpatialMix: 'L', SoftmaxAttention: 'S', BidirectionalGatedDeltaNet: 'G',
         SlidingWindowAttention: 'W'}


def count(model):
    return sum(p.numel() for p in model.parameters())


def letters(model):
    return '/'.join(''.join(KINDS[type(m.attn)] for m in s) for s in model.stages)


def build_layer(name, dims, num_heads, drop_path=0., layer_scale_init_value=None,
                **options):
    """A SoLA layer of mixer ``name`` (conv MLP) with the mixer's ``options``."""
    return Block(dims, build_mixer(name, dims, num_heads, options=options),
                 ConvMlp(dims), drop_path=drop_path,
                 layer_scale_init_value=layer_scale_init_value)


def tiny(cls=SoLAVision, schedule='GG/WG/GGSWGS/GS', **kwargs):
    kwargs.setdefault('head_dim', 8)
    kwargs.setdefault('window_size', 3)
    model = cls(arch=dict(embed_dims=DIMS, schedule=schedule), **kwargs)
    model.init_weights()
    return model


def test_gdn_mixer_is_bidirectional():
    """Without the conv, reversing the tokens reverses the output (the two scans
    swap), and every output token depends on tokens before and after it."""
    torch.manual_seed(0)
    mixer = BidirectionalGatedDeltaNet(16, 2, conv_size=0).double()
    x = torch.randn(2, 35, 16, dtype=torch.float64, requires_grad=True)
    out, state = mixer(x, (5, 7))
    hidden = state.hidden
    flipped, _ = mixer(x.flip(1), (5, 7))
    torch.testing.assert_close(flipped, out.flip(1))
    out[:, 17].sum().backward()
    seen = x.grad.abs().sum((0, 2))
    assert (seen[:17] > 0).all() and (seen[18:] > 0).all()
    assert hidden.shape == (2, 35, 16)


def test_gdn_mixer_float64_runs_in_float64():
    """No step of a float64 forward (gates, decay, output norm) rounds to float32."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class LowPrecision(TorchDispatchMode):
        found = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if any(t.is_floating_point() and t.dtype != torch.float64 for t in
                   (out if isinstance(out, (tuple, list)) else [out])
                   if isinstance(t, torch.Tensor)):
                self.found.add(str(func))
            return out

    mixer = BidirectionalGatedDeltaNet(16, 2).double()
    x = torch.randn(2, 35, 16, dtype=torch.float64)
    with torch.no_grad(), LowPrecision() as mode:
        mixer(x, (5, 7))
    assert not mode.found


def test_gdn_layer_shapes_conv_and_expand():
    layer = build_layer('gated_deltanet', 24, 3, expand_v=2, drop_path=0.1,
                        layer_scale_init_value=1e-5)
    x = torch.randn(2, 5 * 9, 24, requires_grad=True)
    y, state = layer(x, (5, 9))
    assert y.shape == x.shape and state.hidden.shape == (2, 45, 48)
    assert layer.attn.hidden_dims == 48 and layer.attn.conv.kernel_size == (3, 3)
    y.sum().backward()
    for name in ('A_log', 'dt_bias', 'qkv.weight', 'conv.weight'):
        assert layer.attn.get_parameter(name).grad.abs().sum() > 0, name
    assert not any('bias' in n for n, _ in layer.attn.named_parameters()
                   if n != 'dt_bias')  # no projection bias (InfiniteVL)
    with pytest.raises(ValueError, match='divisible'):
        build_layer('gated_deltanet', 24, 5)
    with pytest.raises(ValueError, match='conv_size'):
        build_layer('gated_deltanet', 24, 3, conv_size=4)


def test_gdn_decay_parameterisation():
    mixer = BidirectionalGatedDeltaNet(16, 4)
    A = mixer.A_log.exp()
    dt = torch.nn.functional.softplus(mixer.dt_bias)
    assert ((A > 0) & (A < 16)).all()
    assert ((dt > 0.99e-3) & (dt < 0.101)).all()  # Mamba-2 init range


def test_sliding_window_layer_is_local():
    attn = SlidingWindowAttention(16, 2, window_size=3).double()
    x = torch.randn(1, 6 * 8, 16, dtype=torch.float64, requires_grad=True)
    out, state = attn(x, (6, 8), MixerState())
    assert state == MixerState()
    out[0, 3 * 8 + 4].sum().backward()  # token (3, 4) sees rows 2-4, cols 3-5
    seen = x.grad.abs().sum(-1).view(6, 8) > 0
    expected = torch.zeros(6, 8, dtype=torch.bool)
    expected[2:5, 3:6] = True
    assert torch.equal(seen, expected)
    layer = build_layer('sliding_window', 16, 2, window_size=(3, 5))
    assert layer(torch.randn(2, 7 * 3, 16), (7, 3))[0].shape == (2, 21, 16)
    with pytest.raises(ValueError, match='odd'):
        build_layer('sliding_window', 16, 2, window_size=4)


def test_schedule_vocabulary_and_bridge_from_g():
    model = tiny(hsb_routes=ROUTES)
    assert letters(model) == letters_of(model.mixers) == 'GG/WG/GGSWGS/GS'
    assert model.stages[1][0].attn.window_size == (3, 3)
    # the (1, 2) 'G' layer's read-out feeds the bridge into (3, 3)
    seen = {}
    original = HiddenStateBridge.forward

    def spy(self, x, hw_shape, hidden, hidden_hw):
        seen[id(self)] = (hidden.shape, tuple(hidden_hw))
        return original(self, x, hw_shape, hidden, hidden_hw)

    HiddenStateBridge.forward = spy
    try:
        outs = model(torch.randn(1, 3, 64, 48))
    finally:
        HiddenStateBridge.forward = original
    assert seen[id(model.bridges['3_3'])] == ((1, 16 * 12, 16), (16, 12))
    assert [o.shape[1] for o in outs] == list(DIMS)
    sum(o.mean() for o in outs).backward()
    assert model.bridges['3_3'].proj.weight.grad.abs().sum() > 0


def test_bridge_width_follows_expanded_gdn_values():
    model = tiny(schedule='GG/GG/GGSGGS/GS', hsb_routes=ROUTES,
                 mixer_cfg=dict(G=dict(expand_v=2)))
    assert model.bridges['3_3'].proj.in_features == 2 * DIMS[0]
    model(torch.randn(1, 3, 32, 32))


def test_schedule_errors():
    with pytest.raises(KeyError, match=r"unknown mixer 'Q' in stage 2.*'wkv' \(L\)"):
        tiny(schedule='GG/GQ/GG/GS')
    with pytest.raises(ValueError, match='3 stages'):
        tiny(schedule='GG/GW/GS')
    with pytest.raises(ValueError, match='stage 2 .* has no layer'):
        tiny(schedule='GG//GS/GS')
    with pytest.raises(ValueError, match="source \\(2, 1\\) must be a layer whose "
                                         "mixer carries a hidden state"):
        tiny(hsb_routes=[((2, 1), (3, 3))])
    with pytest.raises(ValueError, match="target \\(3, 2\\) must be a 'softmax' "
                                         "layer, not BidirectionalGatedDeltaNet"):
        tiny(hsb_routes=[((1, 2), (3, 2))])
    with pytest.raises(ValueError, match='outside the layers'):
        tiny(hsb_routes=[((2, 3), (3, 3))])
    with pytest.raises(ValueError, match='deeper'):
        tiny(schedule='GG/GG/GSGS/GS', hsb_routes=[((3, 3), (3, 2))])
    with pytest.raises(ValueError, match='one entry per stage'):
        tiny(window_size=(3, 3, 3))
    with pytest.raises(ValueError, match='odd'):
        tiny(window_size=(3, 3, 4, 3))
    with pytest.raises(KeyError, match="mixer_cfg names unknown mixer 'Q'"):
        tiny(mixer_cfg=dict(Q=dict()))
    with pytest.raises(ValueError, match=r"mixer_cfg\['S'\] has \['expand_v'\]"):
        tiny(mixer_cfg=dict(S=dict(expand_v=2)))


@functools.lru_cache(maxsize=None)
def full_size(cls, arch):
    """A full-size model, built once for the tests that count its parameters."""
    return cls(arch=arch)


def test_gdn_variants_of_sola():
    for arch in ('t', 'b'):
        sola = full_size(SoLAVision, arch)
        gdn = full_size(SoLAVision, f'{arch}-gdn')
        assert letters_of(gdn.mixers) == letters_of(sola.mixers).replace('L', 'G')
        assert gdn.hsb_routes == sola.hsb_routes and len(gdn.bridges) > 0
        # a 'G' layer costs what an 'L' layer does (13 C^2 + small terms)
        assert abs(count(gdn) / count(sola) - 1) < 0.02, (arch, count(gdn))


def test_infinitevl_archs():
    assert block_schedule('WGGG', (2, 2, 6, 2)) == 'WG/GG/WGGGWG/GG'
    assert isinstance(MODELS.build(dict(type='mmhybrid.InfiniteVLVision',
                                        arch='t')), InfiniteVLVision)
    for arch in ('t', 's', 'b'):  # 's': Swin-T's widths, the student of Swin-T
        model, sola = full_size(InfiniteVLVision, arch), full_size(SoLAVision, arch)
        stages = letters_of(model.mixers).split('/')
        assert [len(s) for s in stages] == [len(s) for s in sola.mixers]
        flat = ''.join(stages)  # InfiniteVL's hybrid block, SWA first, repeated
        assert flat == ('WGGG' * len(flat))[:len(flat)]
        assert len(model.bridges) == 0
        # same widths and depths as SoLA: parameters within a few per cent
        assert abs(count(model) / count(sola) - 1) < 0.05
    with pytest.raises(KeyError, match='unknown InfiniteVLVision arch'):
        InfiniteVLVision(arch='l')


@pytest.mark.parametrize('hw', [(64, 64), (97, 45)])
def test_infinitevl_any_size_out_indices(hw):
    model = tiny(InfiniteVLVision, schedule='WG/GG/WGGG/GW',
                 out_indices=(1, 3)).eval()
    with torch.no_grad():
        outs = model(torch.randn(2, 3, *hw))
    h, w = hw
    assert [o.shape for o in outs] == [
        (2, DIMS[1], -(-h // 8), -(-w // 8)), (2, DIMS[3], -(-h // 32), -(-w // 32))]
    assert all(torch.isfinite(o).all() for o in outs)


def test_infinitevl_with_cp_frozen_and_autocast():
    plain = tiny(InfiniteVLVision, schedule='WG/GG/WGGG/GW', drop_path_rate=0.)
    cp = tiny(InfiniteVLVision, schedule='WG/GG/WGGG/GW', drop_path_rate=0.,
              with_cp=True, frozen_stages=1)
    cp.load_state_dict(plain.state_dict())
    x = torch.randn(2, 3, 48, 40)
    grads = []
    for model in (plain, cp):
        model.train()
        sum(o.square().mean() for o in model(x)).backward()
        grads.append(model.stages[2][1].attn.qkv.weight.grad.clone())
    torch.testing.assert_close(grads[0], grads[1])
    assert all(p.grad is None for p in cp.stages[0].parameters())
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        outs = plain.eval()(torch.randn(1, 3, 64, 64))
    assert all(torch.isfinite(o.float()).all() for o in outs)
