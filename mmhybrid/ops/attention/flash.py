"""FlashAttention-2 (the ``flash-attn`` package, 2.8.x) on (..., heads, N, d) tensors."""
import functools

import torch

try:
    from flash_attn import flash_attn_func
except ImportError:  # optional: the `gpu` extra
    flash_attn_func = None

FLASH_DTYPES = (torch.float16, torch.bfloat16)
MAX_HEAD_DIM = 256


_compute_capability = functools.lru_cache(maxsize=None)(torch.cuda.get_device_capability)


def flash_unusable_reason(q, k, v):
    """Why ``flash_attn_func`` cannot take these tensors (a sentence), or None.

    flash-attn 2.8 runs fp16/bf16 CUDA tensors on Ampere or newer GPUs with one
    head size for q, k and v of at most 256; it pads other head sizes to a
    multiple of 8 with a copy of q, k and v, so those go to SDPA instead.
    """
    if flash_attn_func is None:
        return 'flash-attn is not installed (pip install flash-attn)'
    if not (q.is_cuda and k.is_cuda and v.is_cuda):
        return f'the tensors are on {q.device.type}; flash-attn needs CUDA tensors'
    if q.dtype not in FLASH_DTYPES or not q.dtype == k.dtype == v.dtype:
        return (f'dtypes {q.dtype}, {k.dtype}, {v.dtype}; flash-attn needs all '
                f'float16 or all bfloat16')
    if q.dim() < 3 or q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1]:
        return (f'shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)} are not '
                f'(..., heads, N, d) with equal batch and head dims')
    head_dim = q.shape[-1]
    if k.shape[-1] != head_dim or v.shape[-1] != head_dim:
        return 'q, k and v have different head sizes'
    if head_dim > MAX_HEAD_DIM or head_dim % 8:
        return (f'head size {head_dim}: flash-attn takes multiples of 8 up to '
                f'{MAX_HEAD_DIM} without padding copies')
    index = q.device.index if q.device.index is not None else torch.cuda.current_device()
    if _compute_capability(index)[0] < 8:
        return 'flash-attn 2 needs an Ampere (sm80) or newer GPU'
    return None


def flash_attention(q, k, v, dropout_p=0., scale=None):
    """``flash_attn_func`` on (..., heads, N, d) tensors with the semantics of
    ``F.scaled_dot_product_attention`` without a mask. flash-attn wants (batch, N,
    heads, d): the transposes are views (the head dim stays contiguous), so no copy
    is made for our callers, whose q/k/v are head views of a (B, N, heads * d)
    projection.
    """
    def to_flash(t):
        return t.reshape(-1, *t.shape[-3:]).transpose(1, 2)

    out = flash_attn_func(to_flash(q), to_flash(k), to_flash(v), dropout_p=dropout_p,
                          softmax_scale=scale)
    return out.transpose(1, 2).reshape(*q.shape[:-1], v.shape[-1])
