"""Our token-major PatchMerging against mmcv's (nn.Unfold) with the same weights."""
import pytest
import torch
from mmcv.cnn.bricks.transformer import PatchMerging as MMCVPatchMerging

from mmhybrid.layers import PatchMerging


def _pair(in_channels=5, out_channels=7):
    torch.manual_seed(0)
    ours = PatchMerging(in_channels, out_channels).double()
    theirs = MMCVPatchMerging(in_channels, out_channels, kernel_size=2,
                              padding='corner', bias=False).double()
    for p in ours.parameters():  # non-trivial norm parameters
        p.data.normal_()
    theirs.load_state_dict(ours.state_dict())
    return ours, theirs


@pytest.mark.parametrize('hw', [(6, 8), (7, 8), (6, 9), (5, 3), (1, 1)])
def test_matches_mmcv_at_both_parities(hw):
    ours, theirs = _pair()
    x = torch.randn(2, hw[0] * hw[1], 5, dtype=torch.float64, requires_grad=True)
    (out, out_hw), (ref, ref_hw) = ours(x, hw), theirs(x, hw)
    assert out_hw == tuple(ref_hw)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    grad, ref_grad = (torch.autograd.grad(o.sin().sum(), x)[0] for o in (out, ref))
    torch.testing.assert_close(grad, ref_grad, rtol=1e-12, atol=1e-12)


def test_keys_are_mmcv_keys():
    ours, theirs = _pair()
    assert ours.state_dict().keys() == theirs.state_dict().keys()


def test_one_exported_graph_serves_both_parities():
    """Traced at an even size, the program pads odd ones (size arithmetic)."""
    ours, theirs = _pair()

    class Map(torch.nn.Module):
        def forward(self, x):
            H, W = x.shape[-2:]
            return ours(x.flatten(2).transpose(1, 2), (H, W))[0]

    auto = torch.export.Dim.AUTO
    program = torch.export.export(Map(), (torch.randn(2, 5, 8, 10, dtype=torch.float64), ),
                                  dynamic_shapes=({0: auto, 2: auto, 3: auto}, ))
    for H, W in ((7, 9), (6, 11), (9, 4)):
        x = torch.randn(1, 5, H, W, dtype=torch.float64)
        ref = theirs(x.flatten(2).transpose(1, 2), (H, W))[0]
        torch.testing.assert_close(program.module()(x), ref, rtol=1e-12, atol=1e-12)


def test_rejects_a_wrong_token_count():
    with pytest.raises(ValueError, match='do not make a 3x3 map'):
        PatchMerging(4, 8)(torch.randn(1, 8, 4), (3, 3))
