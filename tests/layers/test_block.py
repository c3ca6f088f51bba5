"""The one Block, its MixerState and the arch listing every backbone shares."""
import pytest
import torch

import mmhybrid
from mmhybrid.layers import Block, ConvMlp, MixerState, Mlp
from mmhybrid.layers.mixers import SoftmaxAttention, SpatialMix
from mmhybrid.models.backbones import BACKBONES, HAViT, SoLAVision


def test_block_is_pre_norm_residual_with_layer_scale():
    torch.manual_seed(0)
    block = Block(8, SoftmaxAttention(8, 2), Mlp(8, 2.),
                  layer_scale_init_value=0.5).eval()
    x = torch.randn(2, 6, 8)
    y, state = block(x, (2, 3))
    mixed = x + 0.5 * block.attn(block.norm1(x), (2, 3))[0]
    expected = mixed + 0.5 * block.ffn(block.norm2(mixed))
    torch.testing.assert_close(y, expected)
    assert state == MixerState()


def test_state_carries_the_linear_hidden_state_and_the_history():
    torch.manual_seed(0)
    wkv = Block(8, SpatialMix(8), ConvMlp(8, 2.))
    _, state = wkv(torch.randn(1, 6, 8), (2, 3))
    assert state.hidden.shape == (1, 6, 8) and state.history is None
    historical = Block(8, SoftmaxAttention(8, 2, history=dict(alpha=0.5)),
                       Mlp(8)).eval()
    _, after = historical(torch.randn(1, 6, 8), (2, 3), state)
    assert after.history.shape == (1, 2, 6, 6)
    torch.testing.assert_close(after.hidden, state.hidden)  # passed on untouched


def test_every_backbone_runs_its_blocks_the_same_way():
    """No layer of any backbone is anything but a Block."""
    for cls, arch in ((SoLAVision, 't-gdn'), (HAViT, 'deit-t')):
        model = cls(arch=arch)
        layers = [m for m in model.modules() if hasattr(m, 'attn')
                  and hasattr(m, 'ffn')]
        assert layers and all(type(m) is Block for m in layers)


def test_list_archs_lists_every_arch_table():
    listed = mmhybrid.list_archs()
    assert listed == sorted(f'{cls.__name__}/{a}' for cls in BACKBONES
                            for a in cls.arch_zoo)
    assert 'SoLAVision/t' in listed and 'HAViT/deit-s' in listed
    assert mmhybrid.list_archs('InfiniteVLVision') == ['b', 's', 't']
    with pytest.raises(KeyError, match='unknown backbone'):
        mmhybrid.list_archs('ResNet')
