"""Exact softmax attention: the one place that picks the kernel.

Every exact ``softmax(Q K^T s) V`` of mmhybrid without a mask (ELFATT's block head,
the global 'G' attention, SoLA's and InfViT's 'S' layers, unpadded CSWin stripes,
ELFATT-SD's agent attention) calls :func:`softmax_attention`. It runs
``flash_attn.flash_attn_func`` (:mod:`.flash`) when flash-attn is installed and the
tensors allow it (CUDA, fp16/bf16, Ampere+, head size a multiple of 8 up to 256),
else ``torch.nn.functional.scaled_dot_product_attention`` (``'torch'``, alias
``'sdpa'``, which picks its own fused kernel).
"""
import torch.nn.functional as F

from ..dispatch import choose_backend
from .flash import flash_attention, flash_unusable_reason


def attention_backend(q, k, v, backend=None):
    """``'sdpa'`` or ``'flash'``: the kernel of :func:`softmax_attention` for these
    tensors by the rule of :mod:`mmhybrid.ops.dispatch` (op key
    ``softmax_attention``, names ``'torch'``/``'sdpa'`` and ``'flash'``); automatic:
    flash wherever it can run. A forced flash that cannot run raises."""
    reason = flash_unusable_reason(q, k, v)
    name = choose_backend('softmax_attention', ('torch', 'sdpa', 'flash'),
                          lambda: 'sdpa' if reason else 'flash', backend)
    if name == 'flash' and reason:
        raise RuntimeError(f'attention backend "flash" was requested (backend=, '
                           f'use_backend or MMHYBRID_BACKEND) but cannot run: {reason}')
    return 'sdpa' if name == 'torch' else name


def softmax_attention(q, k, v, dropout_p=0., scale=None, backend=None):
    r"""``softmax(Q K^T s) V`` on (..., heads, N, d) tensors, no mask: the arguments
    and result of ``F.scaled_dot_product_attention``; ``backend`` as
    :func:`attention_backend`."""
    if attention_backend(q, k, v, backend) == 'flash':
        return flash_attention(q, k, v, dropout_p=dropout_p, scale=scale)
    return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, scale=scale)


__all__ = ['softmax_attention', 'attention_backend', 'flash_attention',
           'flash_unusable_reason']
