"""Hidden State Bridge (SoLA-Vision Sec. 4.5, Eq. 10)."""
import torch
import torch.nn as nn

from .inherit import Inherited, zero_module


def equidistant_sample(tokens, src_hw, dst_hw):
    """Parameter-free Samp(.) of Eq. 10: pick the source token nearest to each cell
    centre of an equally spaced ``dst_hw`` grid laid over the ``src_hw`` map.

    Eq. 10 also names the effective interaction range xi_eff (Eq. 5/8) as an
    argument of Samp, but X_HSB must have exactly the target's T_3 tokens, so the
    stride is fixed by the two grids; xi_eff is the paper's reason why one token per
    cell suffices (each WKV state token already summarises its neighbourhood), not
    a free parameter, and the paper gives no epsilon to compute it from.

    Args:
        tokens: (B, Hs * Ws, C).
    Returns:
        (B, Hd * Wd, C).
    """
    (Hs, Ws), (Hd, Wd) = src_hw, dst_hw
    rows = ((torch.arange(Hd, device=tokens.device) + 0.5) * Hs / Hd).long()
    cols = ((torch.arange(Wd, device=tokens.device) + 0.5) * Ws / Wd).long()
    index = (rows[:, None] * Ws + cols[None, :]).flatten()
    return tokens.index_select(1, index)


class HiddenStateBridge(nn.Module):
    r"""Inject a shallow linear layer's hidden state into a deeper softmax layer.

    .. math::
        X_{HSB} = \mathrm{Samp}(H_{src}) W_{HSB}, \qquad
        X_{in} = X + \sigma(W_g X) \odot X_{HSB}

    where X is the output of the layer before the target.
    """

    def __init__(self, src_dims, dst_dims):
        super().__init__()
        self.proj = nn.Linear(src_dims, dst_dims)
        self.gate = nn.Linear(dst_dims, dst_dims)

    def inherit_new(self):
        """A bridge new to a student of a softmax teacher: ``proj`` at zero, so
        it adds nothing at the start; the gate at its init."""
        return Inherited({f'proj.{k}': v for k, v in zero_module(self.proj).items()},
                         '', new={'proj': 'zero (adds nothing)', 'gate': 'init'})

    def forward(self, x, hw_shape, hidden, hidden_hw):
        bridged = self.proj(equidistant_sample(hidden, hidden_hw, hw_shape))
        return x + torch.sigmoid(self.gate(x)) * bridged
