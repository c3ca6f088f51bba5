"""``ops.windows.roll`` (an index gather that exports with symbolic shifts) is
``torch.roll``."""
import pytest
import torch

from mmhybrid.ops.windows import roll


@pytest.mark.parametrize('shifts', [(0, 0), (3, -2), (-3, 2), (6, 4), (-6, -4),
                                    (1, -1)])
def test_roll_is_torch_roll(shifts):
    x = torch.randn(2, 7, 5, 3)
    torch.testing.assert_close(roll(x, shifts, (1, 2)), torch.roll(x, shifts, (1, 2)),
                               rtol=0, atol=0)
