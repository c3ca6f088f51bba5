"""Bidirectional WKV (SoLA-Vision Eq. 9) in O(T C) with plain PyTorch ops.

With a per-channel, position-invariant decay, the sums of Eq. 9 split into a left
part sum_{i<t} e^{-(t-i-1) w} a_i and a right part sum_{i>t} e^{-(i-t-1) w} a_i
(a_i = e^{k_i} v_i, or e^{k_i} for the denominator), plus the diagonal e^{u+k_t} v_t.
Each part is an exclusive prefix sum after factoring e^{-(t-i-1)w} = e^{-(t-1)w} e^{iw}.

Stability: the sequence is cut into chunks short enough that every decay exponent
stays within +-``max_exponent`` (one chunk when |w| T is small, the usual case since
the layer divides its decay by T); keys are shifted by their per-chunk maximum; the
states carried between chunks keep their own log-scale (the running-max trick), and
numerator and denominator share one scale per token, so |k| of 60 or a large |w|
neither overflows nor divides 0 by 0. Inputs in fp16/bf16 are accumulated in fp32.
"""
import math

import torch

MAX_EXPONENT = 30.0


def _chunk_length(w, T, max_exponent):
    w_max = w.detach().abs().max().item() if w.numel() else 0.0
    if w_max * T <= max_exponent:
        return T
    return max(1, int(max_exponent / w_max))


def _left_sums(w, k, kv, k_max):
    """Per chunk: exclusive left sums and the state after the chunk.

    Args:
        w: (C,). k: (B, n, L, C). kv: (B, n, L, C) = v (numerator) or None.
        k_max: (B, n, 1, C) per-chunk key maximum.
    Returns:
        inner (B, n, L, C, 2): sum_{i<t in chunk} e^{-(t-i-1)w + k_i - k_max} [v_i, 1];
        state (B, n, C, 2): the same sum taken at t = L (what leaves the chunk).
    """
    L = k.shape[2]
    pos = torch.arange(L + 1, device=k.device, dtype=k.dtype)[:, None]
    centre = (L - 1) / 2 * w
    # e^{i w - centre + k_i - k_max} stays in e^{+-(L|w|/2)} times a value <= 1.
    a = torch.exp(pos[:L] * w - centre + k - k_max)
    terms = torch.stack((a * kv, a), dim=-1)
    # exclusive prefix sums, including the one at t = L
    prefix = torch.cumsum(terms, dim=2)
    prefix = torch.cat((torch.zeros_like(prefix[:, :, :1]), prefix), dim=2)
    scale = torch.exp(-(pos - 1) * w + centre)[..., None]  # (L + 1, C, 1)
    sums = prefix * scale
    return sums[:, :, :L], sums[:, :, L]


def _carry(state, k_max, w, L):
    """Scan chunk states left to right: what enters each chunk from the left.

    A state is (value, log-scale): the true sum is value * e^{scale}.
    Returns carried values (B, n, C, 2) and scales (B, n, C).
    """
    decay = -L * w
    values, scales = [], []
    value = torch.zeros_like(state[:, 0])
    scale = k_max[:, 0, 0]
    for j in range(state.shape[1]):
        values.append(value)
        scales.append(scale)
        new_scale = torch.maximum(scale + decay, k_max[:, j, 0])
        value = (value * torch.exp(scale + decay - new_scale)[..., None] +
                 state[:, j] * torch.exp(k_max[:, j, 0] - new_scale)[..., None])
        scale = new_scale
    return torch.stack(values, dim=1), torch.stack(scales, dim=1)


def _one_side(w, k, v, k_max, L):
    """Left contributions for every token, as (inner, carried value, carried scale)."""
    inner, state = _left_sums(w, k, v, k_max)
    carried, carried_scale = _carry(state, k_max, w, L)
    pos = torch.arange(L, device=k.device, dtype=k.dtype)[:, None]
    # the carried state enters at the chunk start and decays by e^{-tau w}
    carried_scale = carried_scale[:, :, None] - pos * w  # (B, n, L, C)
    return inner, carried[:, :, None], carried_scale


def chunk_bi_wkv(w, u, k, v, max_exponent=MAX_EXPONENT):
    """Bidirectional WKV of Eq. 9 in O(T C); see the module docstring.

    Args:
        w, u: (C,) decay and bonus, already scaled by the caller.
        k, v: (B, T, C).
    Returns:
        (B, T, C) in the dtype of ``v``.
    """
    B, T, C = k.shape
    out_dtype = v.dtype
    dtype = torch.promote_types(k.dtype, torch.float32)
    w, u, k, v = (x.to(dtype) for x in (w, u, k, v))

    L = _chunk_length(w, T, max_exponent)
    n = math.ceil(T / L)
    pad = n * L - T
    if pad:
        # padded keys carry no weight: e^{-inf} = 0 (and they never set k_max)
        k = torch.cat((k, k.new_full((B, pad, C), float('-inf'))), dim=1)
        v = torch.cat((v, v.new_zeros(B, pad, C)), dim=1)
    k = k.view(B, n, L, C)
    v = v.view(B, n, L, C)
    k_max = k.amax(dim=2, keepdim=True)

    left = _one_side(w, k, v, k_max, L)
    right = _one_side(w, k.flip(2).flip(1), v.flip(2).flip(1),
                      k_max.flip(1), L)
    right = tuple(x.flip(2).flip(1) for x in right)

    # one scale per token for numerator and denominator together
    scale = torch.maximum(k_max, torch.maximum(left[2], right[2]))
    local = left[0] + right[0]
    own = torch.exp(u + k - k_max)
    local = local + torch.stack((own * v, own), dim=-1)
    total = (local * torch.exp(k_max - scale)[..., None] +
             left[1] * torch.exp(left[2] - scale)[..., None] +
             right[1] * torch.exp(right[2] - scale)[..., None])
    out = total[..., 0] / total[..., 1]
    return out.reshape(B, n * L, C)[:, :T].to(out_dtype)
