"""The patch stems pad in the graph: ceil(H / stride) tokens for every size, the
official values where the official stem gives that many, and every backbone's
maps at strides 4/8/16/32 of any input (CSWin included)."""
import pytest
import torch
import torch.nn as nn
from mmcv.cnn.bricks.transformer import AdaptivePadding
from mmcv.cnn.bricks.transformer import PatchEmbed as MMCVPatchEmbed

from mmhybrid.models.utils import PatchEmbed, StemPadding

from tools.tiny_backbones import NAMES, build_tiny

SIZES = [(1, 1), (3, 5), (16, 16), (97, 131), (250, 333), (254, 334)]


@pytest.mark.parametrize('size', SIZES)
@pytest.mark.parametrize('patch', [4, 16])
def test_corner_padding_is_mmcv_adaptive_padding(size, patch):
    x = torch.randn(1, 2, *size)
    ours = StemPadding(patch, patch)(x)
    assert torch.equal(ours, AdaptivePadding(patch, patch, padding='corner')(x))
    assert [s // patch for s in ours.shape[-2:]] == [-(-s // patch) for s in size]


@pytest.mark.parametrize('size', SIZES[1:])  # the official conv needs 3 pixels
def test_cswin_stem_is_official_on_its_grid_and_ceil_elsewhere(size):
    """CSWin's stem: ``nn.Conv2d(3, C, 7, 4, 2)`` officially (floor((H - 3) / 4) + 1
    rows: 62 of 250); ours pads to ceil(H / 4) rows, the same rows where the
    official conv has them."""
    torch.manual_seed(0)
    ours = PatchEmbed(in_channels=3, embed_dims=8, kernel_size=7, stride=4, padding=2)
    official = nn.Conv2d(3, 8, 7, 4, 2)
    official.load_state_dict(ours.projection.state_dict())
    x = torch.randn(1, 3, *size)
    tokens, hw = ours(x)
    assert hw == tuple(-(-s // 4) for s in size)
    ref = official(x)
    h, w = ref.shape[-2:]
    assert (h, w) <= hw
    ours_map = tokens.transpose(1, 2).reshape(1, 8, *hw)[..., :h, :w]
    torch.testing.assert_close(ours_map, ref, rtol=1e-5, atol=1e-6)


def test_patch_embed_keeps_mmcv_state_dict():
    ours = PatchEmbed(in_channels=3, embed_dims=8, kernel_size=4, stride=4,
                      norm_cfg=dict(type='LN'))
    theirs = MMCVPatchEmbed(in_channels=3, embed_dims=8, kernel_size=4, stride=4,
                            norm_cfg=dict(type='LN'))
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(2, 3, 50, 37)
    assert torch.equal(ours(x)[0], theirs(x)[0])


def test_cswin_stem_takes_one_pixel():
    stem = PatchEmbed(in_channels=3, embed_dims=8, kernel_size=7, stride=4, padding=2)
    assert stem(torch.randn(1, 3, 1, 2))[1] == (1, 1)


def test_stem_refuses_a_lead_it_cannot_keep():
    with pytest.raises(ValueError, match='cannot pad 4 in front: use 0..3'):
        StemPadding(7, 4, lead=4)


@pytest.mark.parametrize('name', NAMES)
def test_every_backbone_gives_ceil_strides_off_the_grid(name):
    """README: hierarchical backbones give maps at strides 4/8/16/32 for any input
    size (ceil(H / stride)); plain ones at their patch size."""
    model = build_tiny(name).eval()
    with torch.no_grad():
        outs = model(torch.randn(1, 3, 250, 333))
    hierarchical = len({o.shape[-1] for o in outs}) > 1
    strides = (4, 8, 16, 32) if hierarchical else (
        model.patch_embed.projection.stride[0], ) * len(outs)
    assert [tuple(o.shape[-2:]) for o in outs] == [(-(-250 // s), -(-333 // s))
                                                   for s in strides]


def test_traced_stem_serves_other_sizes():
    """torch.jit.trace (the TorchScript ONNX exporter) keeps the padding in the
    graph: traced at 64x64, right at 250x333."""
    stem = PatchEmbed(in_channels=3, embed_dims=8, kernel_size=7, stride=4, padding=2)
    with torch.no_grad():
        traced = torch.jit.trace(stem, torch.randn(1, 3, 64, 64))
        x = torch.randn(1, 3, 250, 333)
        tokens, hw = traced(x)
        torch.testing.assert_close(tokens, stem(x)[0])
    assert tuple(map(int, hw)) == (63, 84)
