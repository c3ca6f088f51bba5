"""Bidirectional WKV (SoLA-Vision Eq. 9) in O(T C) with plain PyTorch ops.

Eq. 9 applies one symmetric Toeplitz kernel per channel, K(t, i) = e^{-(|t-i|-1) w}
for i != t and K(t, t) = e^{u}, to e^{k} v (numerator) and e^{k} (denominator). The
sequence is laid out channel-first and cut into chunks of L (<= 32) tokens:

* inside a chunk the kernel is an L x L matrix per channel; with the chunk's two state
  weights (towards its right end, towards its left end) appended as columns, one
  batched matmul gives every token its numerator and denominator from its own chunk
  (left, right and itself) and every chunk its states;
* prefix sums over the chunks turn the states into what enters every chunk from the
  left and from the right, added back by a rank-2 matmul.

The backward pass is the same operator once more: K is symmetric, so the gradient with
respect to (e^{k} v, e^{k}) is the kernel applied to (dL/dnum, dL/dden). The gradients
of w and u follow from the L x L matrix's gradient and from the chunk states (small
tensors). Kept for it: e^{k} v, e^{k}, den, the chunk states and the output.

Stability. Keys are shifted by their maximum over the sequence, so e^{k} <= 1. When
every decay factor of the sequence lies within e^{+-30} (T max|w| <= 30, always the
case for the layer, which divides its decay by T) and -20 <= u <= 30, every
denominator is >= e^{-30} times the largest key's term (e^{u} >= e^{-20} at that key
itself), terms that underflow are negligible and no sum exceeds e^{60} T: the fast
path runs in fp32 (fp16/bf16 inputs are accumulated in fp32). Otherwise a wide-range
path computes in float64 with a key maximum per chunk, chunks short enough that
L |w| <= 200, log-scaled chunk states combined by a log-step scan, and the bonus
factored out of the kernel; it is exact for any w, any u and |k| up to ~300, at a few
times the cost (autograd through float64 ops).
"""
import math

import torch

CHUNK = 32
MAX_DECAY_SPAN = 30.0  # fast path: T * max|w|
BONUS_RANGE = (-20.0, 30.0)  # fast path: min u, max u
WIDE_DECAY_SPAN = 200.0  # wide-range path (float64): L * max|w| per chunk


def _chunk_length(T, rows):
    """Chunk length L: the in-chunk matmul costs O(L) per token and its C x L x L kernel
    is shared by the ``rows`` = B sequences, so short inputs use short chunks. A
    divisor of T close to the target avoids padding where one exists."""
    target = CHUNK if rows * T >= 4096 else CHUNK // 2 if rows * T >= 512 else CHUNK // 4
    if T <= target:
        return T
    for L in range(target, target // 2 - 1, -1):
        if T % L == 0:
            return L
    return target


def _kernel_exponents(w, u, L):
    """(C, L, L) log of Eq. 9's kernel in a chunk: -(|t-i|-1) w off the diagonal, u on
    it."""
    pos = torch.arange(L, device=w.device)
    dist = (pos[:, None] - pos[None, :]).abs().to(w.dtype)
    return torch.where(dist == 0, u[:, None, None], -(dist - 1) * w[:, None, None])


def _kernel_matrix(w, u, L):
    return torch.exp(_kernel_exponents(w, u, L))


def _state_weights(w, L):
    """(C, L, 4): weights of a chunk's terms towards its right end e^{-(L-1-l) w}, towards
    its left end e^{-l w}, and their derivatives with respect to w."""
    pos = torch.arange(L, device=w.device, dtype=w.dtype)
    to_end = torch.stack((L - 1 - pos, pos), dim=-1)  # (L, 2)
    E = torch.exp(-to_end * w[:, None, None])
    return torch.cat((E, -to_end * E), dim=-1)


def _carries(S, w, L):
    """What enters every chunk from the left and from the right (single scale).

    Args:
        S: (..., C, 2, n) chunk states: [:, 0] weighted towards each chunk's right end,
            [:, 1] towards its left end.
    Returns:
        (..., C, 2, n): [0, j] = sum_{j'<j} e^{-(j-1-j') L w} S[0, j'] and
        [1, j] = sum_{j'>j} e^{-(j'-j-1) L w} S[1, j'].
    """
    n = S.shape[-1]
    # e^{(j - centre) L w} factors the chunk-to-chunk decay; within e^{+-T|w|/2}
    f = torch.exp((torch.arange(n, device=S.device, dtype=S.dtype) - (n - 1) / 2) *
                  (L * w)[:, None])
    left = torch.cumsum(S[..., 0, :] * f, dim=-1)[..., :-1] / f[:, :-1]
    right = torch.cumsum((S[..., 1, :] / f).flip(-1), dim=-1).flip(-1)[..., 1:] * f[:, 1:]
    zero = S.new_zeros(S.shape[:-2] + (1, ))
    return torch.stack((torch.cat((zero, left), dim=-1),
                        torch.cat((right, zero), dim=-1)), dim=-2)


def _apply_kernel(x, K_aug, w, L):
    """Eq. 9's kernel applied along T to every row of x (B, C, T'), T' = n L.

    ``K_aug`` (C, L, L + 4) is the chunk kernel followed by the state weights, so one
    matmul gives the in-chunk sums and the chunk states; the carries between chunks
    are then added in place. Returns (B, C, n, L + 4): [..., :L] the result,
    [..., L:] the chunk states and their w-derivatives.
    """
    B, C, Tp = x.shape
    n = Tp // L
    out = torch.matmul(x.view(B, C, n, L), K_aug)
    if n > 1:
        carries = _carries(out[..., L:L + 2].transpose(-1, -2).contiguous(), w, L)
        # the left carry enters decaying as e^{-l w}, the right one as e^{-(L-1-l) w};
        # a rank-2 matmul per channel, added in slices of channels (small temporaries)
        expand = K_aug[..., L:L + 2].flip(-1).transpose(-1, -2)  # (C, 2, L)
        step = -(-C // 4)
        for c in range(0, C, step):
            out[:, c:c + step, :, :L] += torch.matmul(
                carries[:, c:c + step].transpose(-1, -2), expand[c:c + step])
    return out


def _to_channel_first(x, out):
    """(B, T, C) -> the first T columns of ``out`` (B, C, T'), batch by batch (a 2-D
    transpose copy has a blocked fast path; a 3-D one does not)."""
    T = x.shape[1]
    for b in range(x.shape[0]):
        out[b, :, :T].copy_(x[b].t())


def _to_channel_last(x, T, dtype):
    """(B, C, T') -> (B, T, C) contiguous of ``dtype``, first T tokens."""
    out = x.new_empty(x.shape[0], T, x.shape[1], dtype=dtype)
    for b in range(x.shape[0]):
        out[b].copy_(x[b, :, :T].t())
    return out


def _load(x, Tp, dtype, pad_value):
    """(B, T, C) -> new (B, C, Tp) channel-first tensor, padded with ``pad_value``."""
    B, T, C = x.shape
    out = x.new_empty(B, C, Tp, dtype=dtype)
    if Tp > T:
        out[..., T:] = pad_value
    _to_channel_first(x, out)
    return out


def _chunk_operators(w, u, L):
    K = _kernel_matrix(w, u, L)
    return torch.cat((K, _state_weights(w, L)), dim=-1)


class _ChunkBiWKV(torch.autograd.Function):
    """Fast path: single key scale, fp32 (or float64) accumulation, analytic backward.

    Numerator and denominator live in separate (B, C, T') tensors: the largest buffer
    is one B T C tensor, which also keeps CPU allocations out of per-call page faults.
    """

    @staticmethod
    def forward(ctx, w, u, k, v):
        B, T, C = k.shape
        dtype = torch.promote_types(torch.promote_types(k.dtype, v.dtype),
                                    torch.float32)
        L = _chunk_length(T, B)
        n = math.ceil(T / L)
        wf, uf = w.detach().to(dtype), u.detach().to(dtype)
        K_aug = _chunk_operators(wf, uf, L)

        # a = e^{k - max k}, av = a v, channel-first; padded tokens weigh 0
        a = _load(k, n * L, dtype, float('-inf'))
        a.sub_(a.amax(dim=-1, keepdim=True)).exp_()
        av = _load(v, n * L, dtype, 0).mul_(a)

        num = _apply_kernel(av, K_aug, wf, L)
        den = _apply_kernel(a, K_aug, wf, L)
        y = torch.div(num[..., :L], den[..., :L]).view(B, C, n * L)
        states = (torch.stack((num[..., L:], den[..., L:])).transpose(-1, -2)
                  if n > 1 else None)
        del num
        out = _to_channel_last(y, T, v.dtype)
        # the output is kept (by its consumer, too) rather than y channel-first
        ctx.save_for_backward(w, u, K_aug, a, av, den, states, out)
        ctx.meta = (L, k.dtype)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        w, u, K_aug, a, av, den, states, out = ctx.saved_tensors
        L, k_dtype = ctx.meta
        B, T, C = out.shape
        Tp = a.shape[-1]
        n = Tp // L
        wf, uf = w.detach().to(a.dtype), u.detach().to(a.dtype)
        need_params = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]

        def chunks(x):
            return x.view(B, C, n, L)

        # dL/dnum = g / den; dL/dX = K dL/dY (K is symmetric); dL/dK = X^T dL/dY
        z = _load(grad_out, Tp, a.dtype, 0)
        chunks(z).div_(den[..., :L])
        p_num = _apply_kernel(z, K_aug, wf, L)
        if need_params:
            dK = torch.matmul(chunks(av).transpose(-1, -2), chunks(z)).sum(0)
        # dL/dden = -g y / den, in place of dL/dnum
        z.mul_(_load(out, Tp, a.dtype, 0)).neg_()
        p_den = _apply_kernel(z, K_aug, wf, L)
        dw = du = None
        if need_params:
            dK += torch.matmul(chunks(a).transpose(-1, -2), chunks(z)).sum(0)
            z_states = (torch.stack((p_num[..., L:], p_den[..., L:])).transpose(-1, -2)
                        if n > 1 else None)
            dw, du = _parameter_grads(wf, uf, L, dK, states, z_states)
            dw, du = dw.to(w.dtype), du.to(u.dtype)

        # X = (a v, a) with a = e^{k - max}: dk = a dX1 + a v dX0, dv = a dX0;
        # each is formed in z's buffer, freeing the sums as soon as possible
        grad = chunks(z)
        if ctx.needs_input_grad[2]:
            torch.mul(p_den[..., :L], chunks(a), out=grad).addcmul_(p_num[..., :L],
                                                                     chunks(av))
        del p_den
        dk = _to_channel_last(z, T, k_dtype) if ctx.needs_input_grad[2] else None
        dv = None
        if ctx.needs_input_grad[3]:
            torch.mul(p_num[..., :L], chunks(a), out=grad)
            del p_num
            dv = _to_channel_last(z, T, out.dtype)
        return dw, du, dk, dv


def _parameter_grads(w, u, L, dK, S, SZ):
    """dL/dw, dL/du from dL/dK (C, L, L) and, across chunks, from the chunk states
    (..., C, 4, n) of X (S) and of Z (SZ) and their w-derivatives: autograd on small
    tensors only."""
    with torch.enable_grad():
        w_ = w.detach().requires_grad_()
        u_ = u.detach().requires_grad_()
        loss = (_kernel_matrix(w_, u_, L) * dK).sum()
        if S is not None:
            # first-order dual numbers: value S, derivative dS/dw
            shift = (w_ - w).view(-1, 1, 1)
            states = S[..., :2, :] + shift * S[..., 2:, :]
            # <Z, H E2> = <Z E2^T, H>; E2^T is E with its columns swapped
            z_states = (SZ[..., :2, :] + shift * SZ[..., 2:, :]).flip(-2)
            loss = loss + (_carries(states, w_, L) * z_states).sum()
        return torch.autograd.grad(loss, (w_, u_))


def _log_scan(x, scale, decay):
    """Inclusive scan x_j <- sum_{j'<=j} e^{-(j-j') decay} x_j' on log-scaled values.

    Args:
        x: (B, 2, C, n) values; the true values are x * e^{scale}.
        scale: (B, C, n). decay: (C, 1) per step.
    """
    n = x.shape[-1]
    step = 1
    while step < n:
        prev = scale[..., :-step] - step * decay
        new = torch.maximum(prev, scale[..., step:])
        merged = (x[..., step:] * torch.exp(scale[..., step:] - new)[:, None] +
                  x[..., :-step] * torch.exp(prev - new)[:, None])
        x = torch.cat((x[..., :step], merged), dim=-1)
        scale = torch.cat((scale[..., :step], new), dim=-1)
        step *= 2
    return x, scale


def _wide_range_bi_wkv(w, u, k, v):
    """Eq. 9 for any w and u (float64, key maximum per chunk, log-scaled carries)."""
    B, T, C = k.shape
    out_dtype = v.dtype
    w, u, k, v = (x.double() for x in (w, u, k, v))
    w_max = w.detach().abs().max().item()
    L = max(1, min(CHUNK, T, int(WIDE_DECAY_SPAN / max(w_max, 1e-12))))
    n = math.ceil(T / L)
    pad = n * L - T
    k = torch.cat((k, k.new_full((B, pad, C), float('-inf'))), dim=1)
    v = torch.cat((v, v.new_zeros(B, pad, C)), dim=1)
    k = k.transpose(1, 2).reshape(B, C, n, L)
    v = v.transpose(1, 2).reshape(B, C, n, L)
    m = k.amax(dim=-1)  # (B, C, n); every chunk holds a real token
    a = torch.exp(k - m[..., None])
    X = torch.stack((a * v, a), dim=1)  # (B, 2, C, n, L)

    # the bonus is factored out of the kernel: e^{u} can exceed any float
    u_pos = u.clamp(min=0)
    Y = torch.matmul(X, torch.exp(_kernel_exponents(w, u, L) -
                                  u_pos[:, None, None]))  # scale e^{m + u_pos}
    scale = m + u_pos[:, None]
    EE = _state_weights(w, L)
    S = torch.matmul(X, EE[..., :2])  # (B, 2, C, n, 2), scale e^{m}
    if n > 1:
        decay = (L * w)[:, None]
        left, left_scale = _log_scan(S[..., 0], m, decay)
        right, right_scale = _log_scan(S[..., 1].flip(-1), m.flip(-1), decay)
        right, right_scale = right.flip(-1), right_scale.flip(-1)
        # shift by one chunk: what enters chunk j comes from j - 1 (left), j + 1 (right)
        zero = left.new_zeros(B, 2, C, 1)
        left = torch.cat((zero, left[..., :-1]), dim=-1)
        right = torch.cat((right[..., 1:], zero), dim=-1)
        left_scale = torch.cat((m[..., :1], left_scale[..., :-1]), dim=-1)
        right_scale = torch.cat((right_scale[..., 1:], m[..., -1:]), dim=-1)
        total_scale = torch.maximum(scale, torch.maximum(left_scale, right_scale))
        expand = EE[..., :2].flip(-1)  # (C, L, 2): e^{-lw}, e^{-(L-1-l)w}
        carried = torch.stack(
            (left * torch.exp(left_scale - total_scale)[:, None],
             right * torch.exp(right_scale - total_scale)[:, None]), dim=-1)
        Y = (Y * torch.exp(scale - total_scale)[:, None, ..., None] +
             torch.matmul(carried, expand.transpose(-1, -2)))
    out = Y[:, 0] / Y[:, 1]  # (B, C, n, L)
    return out.reshape(B, C, n * L)[..., :T].transpose(1, 2).to(out_dtype)


def chunk_bi_wkv(w, u, k, v):
    """Bidirectional WKV of Eq. 9 in O(T C); see the module docstring.

    Args:
        w, u: (C,) decay and bonus, already scaled by the caller.
        k, v: (B, T, C).
    Returns:
        (B, T, C) in the dtype of ``v``.
    """
    T = k.shape[1]
    w_max, u_min, u_max = torch.stack(
        (w.detach().abs().max(), u.detach().min(), u.detach().max())).tolist()
    if (T * w_max <= MAX_DECAY_SPAN and BONUS_RANGE[0] <= u_min
            and u_max <= BONUS_RANGE[1]):
        return _ChunkBiWKV.apply(w, u, k, v)
    return _wide_range_bi_wkv(w, u, k, v)
