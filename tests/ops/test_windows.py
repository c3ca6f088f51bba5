"""``ops.windows.roll`` (an index gather that exports with symbolic shifts) is
``torch.roll``, eagerly and as one torch.export graph at other sizes."""
import pytest
import torch

from mmhybrid.ops.windows import roll


@pytest.mark.parametrize('shifts', [(0, 0), (3, -2), (-3, 2), (6, 4), (-6, -4),
                                    (1, -1)])
def test_roll_is_torch_roll(shifts):
    x = torch.randn(2, 7, 5, 3)
    torch.testing.assert_close(roll(x, shifts, (1, 2)), torch.roll(x, shifts, (1, 2)),
                               rtol=0, atol=0)


def test_exported_roll_holds_at_other_sizes():
    """A constant shift and one computed from the size (Swin's), both wrapping."""

    class Roll(torch.nn.Module):
        def forward(self, x):
            return roll(x, (-3, x.shape[2] // 2 + 4), (1, 2))

    auto = torch.export.Dim.AUTO
    graph = torch.export.export(Roll(), (torch.randn(2, 7, 5, 3), ),
                                dynamic_shapes=({1: auto, 2: auto}, )).module()
    for h, w in ((2, 3), (9, 4), (13, 17)):
        x = torch.randn(2, h, w, 3)
        torch.testing.assert_close(graph(x), torch.roll(x, (-3, w // 2 + 4), (1, 2)),
                                   rtol=0, atol=0)
