"""The global linear head of ELFATT: efficient attention (EFFATT, Shen et al. 2021)."""
import torch

from ..dispatch import fused_module, triton_or_torch
from ..heads import check_heads, head_matmul
from ..tracing import no_autocast


def effatt_backend(q, k, v, backend=None):
    """``'torch'`` or ``'triton'`` (:mod:`.fused`), by the rule of
    :mod:`mmhybrid.ops.dispatch`; automatic: triton for CUDA tensors."""
    return triton_or_torch('effatt', __package__, (q, k, v), backend)


def effatt(q, k, v, backend=None):
    r"""``softmax(Q) (softmax(K)^T V)``: the first term of ELFATT Eq. 8, O(N d^2).

    ``softmax(Q)`` normalises every query over its d features and ``softmax(K)``
    every key feature over the N tokens, so each output token is a convex
    combination of d "global context" vectors ``softmax(K)[:, i]^T V``. No scale is
    applied (a per-row softmax of Q already fixes the magnitude); LePE is added by
    the layer, not here.

    Args:
        q, k: (B, heads, N, d); v: (B, heads, N, dv), one float dtype.
        backend (str, optional): see :func:`effatt_backend`.
    Returns:
        (B, heads, N, dv) in the dtype of ``v``.
    """
    check_heads(q, k, v)
    if effatt_backend(q, k, v, backend) == 'triton':
        return fused_module(__package__, 'effatt').triton_effatt(q, k, v)
    return torch_effatt(q, k, v)


def torch_effatt(q, k, v):
    r"""EFFATT in PyTorch, computed right to left.

    Passes over the tokens: the two softmaxes (each reads its input and writes one
    N x d tensor, which autograd keeps for the products' backward), ``K^T V``
    (reads both) and ``Q (K^T V)`` (reads ``softmax(Q)``, writes the output). The
    softmaxes compute in float32 and write the input dtype (no float32 copies).
    ``K^T V`` runs per batch element (:func:`head_matmul`: ``matmul`` would copy
    the head view ``v``); ``softmax(Q)`` is contiguous, so ``@`` copies nothing.
    """
    # Under autocast the softmaxes would write float32 and the products copy them
    # back to half; q, k, v already come in the autocast dtype.
    with no_autocast(q.device.type):
        context = head_matmul(k.softmax(dim=-2).transpose(-2, -1), v)  # (B, h, d, dv)
        return q.softmax(dim=-1) @ context
