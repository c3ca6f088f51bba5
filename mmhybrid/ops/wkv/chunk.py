"""Bidirectional WKV (SoLA-Vision Eq. 9) in O(T C) with plain PyTorch ops.

Eq. 9 applies one symmetric Toeplitz kernel per channel, K(t, i) = e^{-(|t-i|-1) w}
for i != t and K(t, t) = e^{u}, to e^{k} v (numerator) and e^{k} (denominator). The
sequence is laid out channel-first (the output is a channel-major view of (B, T, C),
which its consumer reads in place of a transposing copy) and cut into chunks of L
tokens: inside a chunk the kernel is an L x L matrix per channel (one batched
matmul); each chunk's two states (its terms weighted towards either end) go through
prefix sums over the chunks and come back as what enters every chunk from the left
and from the right (a rank-2 matmul). A long sequence is streamed in segments of
tokens, twice (states, then outputs; e^{k} is recomputed), so that no temporary is
a fresh full-sequence allocation: at 1024^2 those are page-faulted in by glibc and
cost more than the arithmetic (docs/benchmarks.md).

The backward pass is the same operator once more: K is symmetric, so the gradient with
respect to (e^{k} v, e^{k}) is the kernel applied to (dL/dnum, dL/dden). The gradients
of w and u follow from the L x L matrix's gradient and from the chunk states (small
tensors). Kept for it: k, v, den, the chunk states and the output.

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
import torch.nn.functional as F

from ..heads import spans
from ..tracing import is_tracing, no_autocast

CHUNK = 16
SEGMENT = 4096  # tokens streamed at a time through a long sequence
WHOLE = 2**21  # B T C up to which a sequence is one segment
LOG2E = 1 / math.log(2)
MAX_DECAY_SPAN = 30.0  # fast path: T * max|w|
BONUS_RANGE = (-20.0, 30.0)  # fast path: min u, max u
WIDE_DECAY_SPAN = 200.0  # wide-range path (float64): L * max|w| per chunk


def _layout(T, numel):
    """Chunk length L and the token segments streamed through, by measurement
    (docs/benchmarks.md). A traced graph serves every T: one segment of chunks of
    L = 1, the plain prefix-sum form (no padding, no size arithmetic for the
    exporters to get wrong)."""
    if is_tracing():
        return 1, [(0, T)]
    L = min(CHUNK, T)
    S = T if numel <= WHOLE else SEGMENT // L * L
    return L, spans(T, S)


def _kernel_exponents(w, u, L):
    """(C, L, L) log of Eq. 9's kernel in a chunk: -(|t-i|-1) w off the diagonal, u on
    it."""
    pos = torch.arange(L, device=w.device)
    dist = (pos[:, None] - pos[None, :]).abs().to(w.dtype)
    return torch.where(dist == 0, u[:, None, None], -(dist - 1) * w[:, None, None])


def _state_weights(w, L):
    """(C, L, 4): weights of a chunk's terms towards its right end e^{-(L-1-l) w}, towards
    its left end e^{-l w}, and their derivatives with respect to w."""
    pos = torch.arange(L, device=w.device, dtype=w.dtype)
    to_end = torch.stack((L - 1 - pos, pos), dim=-1)  # (L, 2)
    E = torch.exp(-to_end * w[:, None, None])
    return torch.cat((E, -to_end * E), dim=-1)


def _chunk_positions(n, like):
    """(n,) chunk indices centred on the middle chunk, in the dtype of ``like``."""
    return torch.arange(n, device=like.device, dtype=like.dtype) - (n - 1) / 2


def _carries(S, w, L):
    """What enters every chunk from the left and from the right (single scale).

    Args:
        S: (..., 2, n) chunk states: [0] weighted towards each chunk's right end, [1]
            towards its left end.
        w: decays broadcastable to S[..., 0, 0] (``w[:, None]`` for (C, B, 2, n)).
    Returns:
        (..., 2, n): [0, j] = sum_{j'<j} e^{-(j-1-j') L w} S[0, j'] and
        [1, j] = sum_{j'>j} e^{-(j'-j-1) L w} S[1, j'].
    """
    # e^{(j - centre) L w} factors the chunk-to-chunk decay; within e^{+-T|w|/2}
    f = torch.exp(_chunk_positions(S.shape[-1], S) * (L * w)[..., None])
    left = torch.cumsum(S[..., 0, :] * f, dim=-1)[..., :-1] / f[..., :-1]
    right = torch.cumsum((S[..., 1, :] / f).flip(-1), dim=-1).flip(-1)
    right = right[..., 1:] * f[..., 1:]
    return torch.stack((F.pad(left, (1, 0)), F.pad(right, (0, 1))), dim=-2)


def _pad(x, L):  # (C, B, n) zero-padded to whole chunks of L tokens
    return F.pad(x, (0, L - x.shape[-1] % L)) if x.shape[-1] % L else x


def _channel_major(x):
    """x (B, T, C) as a channel-major view: itself if it is one, else one 2-D
    transposing copy (cheaper than transposed reads in every pass)."""
    if x.permute(2, 0, 1).is_contiguous():
        return x
    B, T, C = x.shape
    return x.reshape(-1, C).t().contiguous().view(C, B, T).permute(1, 2, 0)


def _segment(x, t0, t1):  # tokens [t0, t1) of x (B, T, C) as a (C, B, n) view
    return x[:, t0:t1].permute(2, 0, 1)


def _inputs(k, v, m, t0, t1, L, dtype):
    """X = (a v, a) of tokens [t0, t1), (C, B, n) each, padded, a = e^{k - max k} =
    2^{k log2 e + m}: exp2 is ~2.5x faster than exp on CPU (the TorchScript ONNX
    exporter lacks it)."""
    a = torch.add(m, _segment(k, t0, t1).to(dtype), alpha=LOG2E)
    a = a.mul_(math.log(2)).exp_() if torch.jit.is_tracing() else a.exp2_()
    return _pad(a * _segment(v, t0, t1), L), _pad(a, L)


def _stream(make, finish, K, E, w, L, segs, n_out):
    """Eq. 9's kernel on the pair X = ``make(t0, t1)`` ((C, B, n) each, n a multiple
    of L), segment by segment. Pass 1: every chunk's states ``E^T X^T`` (towards its
    two ends, and their w-derivatives), whose prefix sums are the carries. Pass 2
    (X made again unless there is one segment): ``X K`` plus the carries (the left
    one decays as e^{-l w}, the right one as e^{-(L-1-l) w}); ``finish(t0, t1, X, Y)``
    gives outputs (C, B, t1 - t0), written into (C, B, T) ones. Returns them and the
    chunk states (2, C, B, 4, n)."""
    Et, states, outs = E.transpose(1, 2), [], []
    for t0, t1 in segs:
        X = make(t0, t1)
        C, B = X[0].shape[:2]
        if len(segs) > 1 and not outs:  # (C, B, T) outputs, allocated once
            outs = [X[0].new_empty(C, B, segs[-1][1]) for _ in range(n_out)]
        states.append(torch.stack([torch.bmm(Et, x.reshape(C, -1, L).transpose(1, 2))
                                   for x in X]).view(2, C, 4, B, -1))
    states = torch.cat(states, dim=-1).transpose(2, 3)
    carries = _carries(states[..., :2, :], w[:, None], L).transpose(-1, -2)
    expand = E[..., :2].flip(-1).transpose(-1, -2)
    for t0, t1 in segs:
        X = X if len(segs) == 1 else make(t0, t1)
        j0, j1 = t0 // L, t0 // L + X[0].shape[-1] // L
        Y = [torch.bmm(x.reshape(C, -1, L), K).baddbmm_(
            car[:, :, j0:j1].reshape(C, -1, 2), expand).view(x.shape)
             for x, car in zip(X, carries)]
        res = finish(t0, t1, X, Y)
        if len(segs) == 1:
            return res, states
        for o, r in zip(outs, res):
            o[..., t0:t1] = r
    return outs, states


def _fast_bi_wkv(w, u, k, v, keep=False):
    """The fast path's forward: the output (B, T, C), a channel-major view, and (with
    ``keep``) what its backward keeps."""
    T, k, v = k.shape[1], _channel_major(k), _channel_major(v)
    dtype = torch.promote_types(torch.promote_types(k.dtype, v.dtype), torch.float32)
    L, segs = _layout(T, k.numel())
    wf, uf = w.detach().to(dtype), u.detach().to(dtype)
    K, E = torch.exp(_kernel_exponents(wf, uf, L)), _state_weights(wf, L)
    m = k.detach().amax(1).t()[..., None].to(dtype) * -LOG2E  # a <= 1

    def finish(t0, t1, X, Y):  # out = num / den (and den)
        num, den = (y[..., :t1 - t0] for y in Y)
        return (num / den, ) + (den, ) * keep

    with no_autocast(k.device.type):  # fp32 sums under autocast too
        outs, states = _stream(lambda t0, t1: _inputs(k, v, m, t0, t1, L, dtype),
                               finish, K, E, wf, L, segs, 1 + keep)
    return outs[0].permute(1, 2, 0).to(v.dtype), (L, segs, k, v, K, E, m, *outs[1:], states)


class _ChunkBiWKV(torch.autograd.Function):
    """Fast path: single key scale, fp32 (or float64) accumulation, analytic backward
    (it keeps k, v, the denominator, the chunk states and the output)."""

    @staticmethod
    def forward(ctx, w, u, k, v):
        out, (L, segs, k, v, K, E, m, den, states) = _fast_bi_wkv(w, u, k, v, keep=True)
        ctx.save_for_backward(w, u, k, v, K, E, m, den, states, out)
        ctx.layout = L, segs
        return out

    @staticmethod
    def backward(ctx, grad_out):
        w, u, k, v, K, E, m, den, states, out = ctx.saved_tensors
        (L, segs), dtype = ctx.layout, den.dtype
        wf = w.detach().to(dtype)
        dK = torch.zeros_like(K)

        def grads(t0, t1):  # Z = (dL/dnum, dL/dden) = (g / den, -g y / den)
            z = _segment(grad_out, t0, t1).to(dtype) / den[..., t0:t1]
            return _pad(z, L), _pad((z * _segment(out, t0, t1)).neg_(), L)

        def finish(t0, t1, Z, P):
            # dL/dX = K Z (K is symmetric); dL/dK = X^T Z; X = (a v, a) with
            # a = e^{k - max}: dk = a v P0 + a P1, dv = a P0
            X, n = _inputs(k, v, m, t0, t1, L, dtype), t1 - t0
            for x, z in zip(X, Z):
                dK.baddbmm_(x.reshape(len(K), -1, L).transpose(1, 2), z.reshape(len(K), -1, L))
            av, a, p0, p1 = (x[..., :n] for x in (*X, *P))
            return torch.addcmul(av * p0, a, p1), a * p0

        with no_autocast(k.device.type):
            (dk, dv), z_states = _stream(grads, finish, K, E, wf, L, segs, 2)
            dw, du = _parameter_grads(wf, K, L, dK, states, z_states)
        return (dw.to(w.dtype), du.to(u.dtype), dk.permute(1, 2, 0).to(k.dtype),
                dv.permute(1, 2, 0).to(v.dtype))


def _parameter_grads(w, K, L, dK, S, SZ):
    """dL/dw, dL/du (C,) from dL/dK (C, L, L) and, across chunks, from the chunk states
    (2, C, B, 4, n) of X (S) and of Z (SZ): values [:2] and w-derivatives [2:].

    The kernel part is dK * K times dE/dw = -(|t-i|-1) off the diagonal (dE/du = 1 on
    it). The carry part is d/dw <carries(S(w), w), Z(w)>, with ``Z`` the states of Z
    with their two columns swapped (<Z, H E2> = <Z E2^T, H>): the carries of dS/dw
    against Z, those of S against dZ/dw, and the explicit w-dependence. With chunk
    positions p (centred) and f_j = e^{p_j L w}, left[j] = sum_{j'<j} f_j' S0_j' /
    f_{j-1} gives d left[j]/dw = L (left(p S0)[j] - (p_j - 1) left[j]), and right[j] =
    f_{j+1} sum_{j'>j} S1_j' / f_j' gives L ((p_j + 1) right[j] - right(p S1)[j]).
    """
    G, one = dK * K, torch.ones_like(w[:1])
    du = torch.diagonal(G, dim1=-2, dim2=-1).sum(-1)
    dw = (G * _kernel_exponents(one, one - 1, L)).sum((-2, -1))  # dE/dw
    X, dX = S[..., :2, :], S[..., 2:, :]
    Z, dZ = SZ[..., :2, :].flip(-2), SZ[..., 2:, :].flip(-2)
    p = _chunk_positions(S.shape[-1], S)
    car, car_dX, car_pX = _carries(torch.stack((X, dX, p * X)), w[:, None], L)
    explicit = L * torch.stack((car_pX[..., 0, :] - (p - 1) * car[..., 0, :],
                                (p + 1) * car[..., 1, :] - car_pX[..., 1, :]), dim=-2)
    carry_grad = (car_dX + explicit) * Z + car * dZ
    return dw + carry_grad.sum((0, 2, 3, 4)), du


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
    k = F.pad(k.transpose(1, 2), (0, pad), value=float('-inf')).reshape(B, C, n, L)
    v = F.pad(v.transpose(1, 2), (0, pad)).reshape(B, C, n, L)
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
        left, right = F.pad(left[..., :-1], (1, 0)), F.pad(right[..., 1:], (0, 1))
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


def _fast_path_holds(w, u, T):
    """(bool tensor) T max|w| <= MAX_DECAY_SPAN and u within BONUS_RANGE."""
    w, u = w.detach(), u.detach()
    return ((T * w.abs().max() <= MAX_DECAY_SPAN) & (u.min() >= BONUS_RANGE[0]) &
            (u.max() <= BONUS_RANGE[1]))


def chunk_bi_wkv(w, u, k, v):
    """Bidirectional WKV of Eq. 9 in O(T C); see the module docstring.

    Eager calls read the range check on the host and take the wide-range path where
    the fast one would lose precision. A traced graph (TorchScript/ONNX export,
    torch.compile, torch.export) holds the fast path only: under torch.compile and
    torch.export the range check stays in the graph as a runtime assertion; the
    ONNX exporter cannot keep one, so ``tools/deploy/export.py`` checks the model's
    decays before it exports.

    Args:
        w, u: (C,) decay and bonus, already scaled by the caller.
        k, v: (B, T, C).
    Returns:
        (B, T, C) in the dtype of ``v``.
    """
    fast = _fast_path_holds(w, u, k.shape[1])
    if torch.compiler.is_compiling():
        torch._assert_async(fast, 'bi_wkv: T * max|w| > 30 or u outside [-20, 30]: '
                            'the compiled fp32 path would lose precision')
    elif not torch.jit.is_tracing() and not fast:
        return _wide_range_bi_wkv(w, u, k, v)
    if (torch.is_grad_enabled() and not torch.jit.is_tracing()
            and any(x.requires_grad for x in (w, u, k, v))):
        return _ChunkBiWKV.apply(w, u, k, v)
    return _fast_bi_wkv(w, u, k, v)[0]
