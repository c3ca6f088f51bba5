"""The global linear head of ELFATT: efficient attention (EFFATT, Shen et al. 2021).

:func:`effatt` dispatches to :func:`torch_effatt` or the Triton kernels of
:mod:`.fused` (the automatic choice for CUDA tensors when Triton imports) by the
rule of :mod:`mmhybrid.ops.dispatch`.
"""
import importlib

import torch

from ..dispatch import choose_backend, triton_if_usable
from ..head_matmul import head_matmul

BACKENDS = ('torch', 'triton')


def _fused():
    """:mod:`.fused`, imported on first use (Triton is optional and slow to import)."""
    return importlib.import_module('.fused', __package__)


def effatt_backend(q, k, v, backend=None):
    """The backend :func:`effatt` runs (:mod:`mmhybrid.ops.dispatch`); automatic:
    ``'triton'`` for CUDA tensors when Triton imports, else ``'torch'``."""
    return choose_backend('effatt', BACKENDS, lambda: triton_if_usable(_fused, q, k, v),
                          backend)


def effatt(q, k, v, backend=None):
    r"""``softmax(Q) (softmax(K)^T V)``: the first term of ELFATT Eq. 8, O(N d^2).

    Args:
        q, k: (B, heads, N, d); v: (B, heads, N, dv), one float dtype.
        backend (str, optional): ``'torch'`` or ``'triton'``; see
            :func:`effatt_backend`.
    Returns:
        (B, heads, N, dv) in the dtype of ``v``.
    """
    if q.shape != k.shape or q.shape[:-1] != v.shape[:-1]:
        raise ValueError(f'q, k must be (B, heads, N, d) and v (B, heads, N, dv); '
                         f'got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}')
    if effatt_backend(q, k, v, backend) == 'triton':
        try:
            fused = _fused()
        except ImportError as err:
            raise RuntimeError(f'EFFATT triton backend: triton does not import '
                               f'({err})') from err
        return fused.triton_effatt(q, k, v)
    return torch_effatt(q, k, v)


def torch_effatt(q, k, v):
    r"""EFFATT in PyTorch: ``softmax(Q) (softmax(K)^T V)``, computed right to left.

    ``softmax(Q)`` normalises every query over its d features and ``softmax(K)``
    every key feature over the N tokens, so each output token is a convex
    combination of d "global context" vectors ``softmax(K)[:, i]^T V``. No scale is
    applied (a per-row softmax of Q already fixes the magnitude); LePE is added by
    the layer, not here.

    Passes over the tokens: the two softmaxes (each reads its input and writes one
    N x d tensor, which autograd keeps for the products' backward), ``K^T V``
    (reads both) and ``Q (K^T V)`` (reads ``softmax(Q)``, writes the output). The
    softmaxes compute in float32 and write the input dtype (no float32 copies).
    ``K^T V`` runs per batch element (:func:`head_matmul`: ``matmul`` would copy
    the head view ``v``); ``softmax(Q)`` is contiguous, so ``@`` copies nothing.

    Arguments as :func:`effatt`.
    """
    # Under autocast the softmaxes would write float32 and the products copy them
    # back to half; q, k, v already come in the autocast dtype.
    with torch.autocast(q.device.type, enabled=False):
        context = head_matmul(k.softmax(dim=-2).transpose(-2, -1), v)  # (B, h, d, dv)
        return q.softmax(dim=-1) @ context
