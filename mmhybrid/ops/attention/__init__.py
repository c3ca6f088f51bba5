"""Exact softmax attention: the one place that picks the kernel.

Every exact ``softmax(Q K^T s) V`` of mmhybrid without a mask (ELFATT's block head,
the global 'G' attention, SoLA's and InfViT's 'S' layers, unpadded CSWin stripes,
ELFATT-SD's agent attention) calls :func:`softmax_attention`. It runs
``flash_attn.flash_attn_func`` (:mod:`.flash`) when flash-attn is installed and the
tensors allow it (CUDA, fp16/bf16, Ampere+, head size a multiple of 8 up to 256),
else ``torch.nn.functional.scaled_dot_product_attention`` (``'torch'``, alias
``'sdpa'``, which picks its own fused kernel). The choice follows
:mod:`mmhybrid.ops.dispatch` (op key ``softmax_attention``); forcing ``flash``
where it cannot run raises instead of falling back silently.
"""
import torch.nn.functional as F

from ..dispatch import choose_backend
from .flash import flash_attention, flash_unusable_reason

BACKENDS = ('torch', 'sdpa', 'flash')


def attention_backend(q, k, v, backend=None):
    """The backend :func:`softmax_attention` uses for these tensors.

    ``'torch'`` (alias ``'sdpa'``) or ``'flash'``, by :mod:`mmhybrid.ops.dispatch`'s
    rule; automatic: flash wherever it can run. Returns ``'sdpa'`` or ``'flash'``.
    """
    name = choose_backend('softmax_attention', BACKENDS, lambda: 'sdpa' if
                          flash_unusable_reason(q, k, v) else 'flash', backend)
    if name == 'flash':
        reason = flash_unusable_reason(q, k, v)
        if reason is not None:
            raise RuntimeError(f'attention backend "flash" was requested (backend=, '
                               f'use_backend or MMHYBRID_BACKEND) but cannot run: '
                               f'{reason}')
    return 'sdpa' if name == 'torch' else name


def softmax_attention(q, k, v, dropout_p=0., scale=None, backend=None):
    r"""``softmax(Q K^T s) V`` on (..., heads, N, d) tensors, no mask.

    Same arguments and result as ``F.scaled_dot_product_attention(q, k, v,
    dropout_p=dropout_p, scale=scale)``; ``scale`` defaults to ``d ** -0.5``.
    ``backend``: ``'torch'``/``'sdpa'``, ``'flash'`` or None (see
    :func:`attention_backend`).
    """
    if attention_backend(q, k, v, backend) == 'flash':
        return flash_attention(q, k, v, dropout_p=dropout_p, scale=scale)
    return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, scale=scale)


__all__ = ['softmax_attention', 'attention_backend', 'flash_attention',
           'flash_unusable_reason']
