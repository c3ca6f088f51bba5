r"""Gated delta rule in chunks with plain PyTorch ops (the WY / UT form).

Inside a chunk of C tokens, with ``G_r = sum_{i<=r} g_i`` (cumulative log-decay
from the chunk start) and ``M_0`` the state entering the chunk, unrolling
``M_r = e^{g_r} M_{r-1} + beta_r k_r (v_r - e^{g_r} M_{r-1}^T k_r)^T`` gives

.. math::
    M_r = e^{G_r} M_0 + \sum_{j \le r} e^{G_r - G_j} k_j \delta_j^T, \qquad
    (I + A) \Delta = \mathrm{diag}(\beta) (V - \mathrm{diag}(e^{G}) K M_0),

where ``A_{rj} = beta_r e^{G_r - G_j} k_r^T k_j`` for ``j < r`` (strictly lower
triangular). So ``Delta = U - W M_0`` with ``U = T diag(beta) V``,
``W = T diag(beta e^G) K`` and ``T = (I + A)^{-1}`` (the UT transform of the WY
representation). With ``K~ = diag(e^{G_C - G}) K``,

.. math::
    O = s\,\mathrm{diag}(e^{G}) Q M_0 + (s Q K^T \odot D) \Delta, \qquad
    M_C = (e^{G_C} I - K~^T W) M_0 + K~^T U,

``D_{rj} = e^{G_r - G_j}`` for ``j <= r`` and 0 above. Everything but the state
recurrence ``M_C = A_c M_0 + B_c`` (one small matmul per chunk) is a batched
matmul over the chunks. Every exponent is <= 0, so nothing overflows.

The sequence is streamed in segments of ``segment_size`` tokens (whole chunks),
the state carried from one to the next: every temporary is a segment's, not the
sequence's, so it stays in cache and below the allocator's mmap threshold (a
fresh ``mmap``'d block is page-faulted in at a fraction of memory bandwidth). The
result is the same as one pass over all chunks (the chunk maths is unchanged).
``bidirectional`` batches segment j of the sequences with segment j of their
reverses, so no reversed or 2B-batched copy of a whole sequence is made.

The backward pass is written by hand (:class:`ChunkGatedDeltaRule`), segment by
segment in reverse: the adjoint recurrence ``dM_0 = A_c^T dM_C + R_c`` (one
matmul per chunk) and the rest batched; two identities keep it short: ``T^T`` is
needed only as ``dV_beta = T^T dDelta``, and then ``dA = -dV_beta Delta^T``
(``Delta = U - W M_0``). Inputs in fp16/bf16 are computed in fp32.

Under a tracer (:func:`mmhybrid.ops.tracing.is_tracing`) one graph must hold for
every length: plain ops that autograd differentiates, a fixed chunk length, one
segment padded to whole chunks by size arithmetic, and the state recurrence as a
loop the graph keeps, in the form each tracer needs (:mod:`.recurrence`).
"""
import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from ..heads import acc_dtype, spans
from ..tracing import is_tracing, no_autocast
from .naive import L2NORM_EPS
from .recurrence import recurrence


def diagonal_blocks(a, size):
    """The (nb, M / size, size, size) diagonal blocks of (nb, M, M) matrices: a view.

    Under a tracer, reshapes and slices instead (ONNX exports ``diagonal`` as a
    ``GatherND`` inside an ``If``: 0.35 s of InfiniteVL-T's 2.6 s in onnxruntime at
    512^2): block j starts at flat index j (M + 1) size, so the flat matrix padded
    by M is an (M / size, (M + 1) size) array whose row j begins with block j's
    ``size`` rows of M entries each, of which the first ``size`` are the block's.
    """
    nb, M = a.shape[0], a.shape[-1]
    m = M // size
    if not is_tracing():
        blocks = a.view(nb, m, size, m, size).diagonal(dim1=1, dim2=3)
        return blocks.permute(0, 3, 1, 2)
    flat = F.pad(a.reshape(nb, M * M), (0, M)).view(nb, m, (M + 1) * size)
    return flat[..., :M * size].reshape(nb, m, size, M)[..., :size]


def unit_lower_inverse(a):
    """``(I + tril(a, -1))^{-1}`` for a batch (..., C, C), C a power of two.

    Block doubling: with the inverses ``T11``, ``T22`` of the diagonal blocks of
    size s known, those of size 2s are ``[[T11, 0], [-T22 A21 T11, T22]]``. It
    reads only the strictly lower part of ``a``; two batched matmuls per level.
    Inverse and product against ``torch.linalg.solve_triangular`` with 64
    right-hand sides, one CPU thread, one comparison on a loaded machine: 1.6x
    faster at 384 matrices of 32 (a segment of 1024 tokens), 1.2x at 3072, 0.8x
    at 12288 (why segments use it); solve_triangular has no ONNX counterpart.
    """
    C = a.shape[-1]
    if C & (C - 1):
        raise ValueError(f'unit_lower_inverse needs a power-of-two size, got {C}')
    a = a.reshape(-1, C, C)
    nb = a.shape[0]
    t = a.new_ones(nb, C, 1, 1)  # the diagonal blocks of T, (nb, C / s, s, s)
    size = 1
    while size < C:
        a21 = diagonal_blocks(a, 2 * size)[..., size:, :size]
        t11, t22 = t[:, 0::2], t[:, 1::2]
        t21 = -(t22 @ a21 @ t11)
        t = torch.cat((torch.cat((t11, torch.zeros_like(t11)), -1),
                       torch.cat((t21, t22), -1)), -2)
        size *= 2
    return t.view(nb, C, C)


def to_chunks(x, chunk):
    """(B, L, H, ...) -> (L / chunk, B, H, chunk, ...), L a multiple of chunk."""
    B, L, H = x.shape[:3]
    x = x.reshape(B, L // chunk, chunk, H, *x.shape[3:])
    return x.permute(1, 0, 3, 2, *range(4, x.dim())).contiguous()


def from_chunks(x):
    """(n, B, H, chunk, ...) -> (B, n * chunk, H, ...)."""
    n, B, H, chunk = x.shape[:4]
    x = x.permute(1, 0, 3, 2, *range(4, x.dim()))
    return x.reshape(B, n * chunk, H, *x.shape[4:])


def _baddbmm(c, a, b, alpha=1):
    """``c + alpha a @ b`` over any leading dims (one fused call)."""
    lead = a.shape[:-2]
    out = torch.baddbmm(c.reshape(-1, *c.shape[-2:]), a.reshape(-1, *a.shape[-2:]),
                        b.reshape(-1, *b.shape[-2:]), alpha=alpha)
    return out.view(*lead, *out.shape[-2:])


def _rowdot(a, b):
    """``sum(a * b, -1)``, keeping the last dim."""
    return (a * b).sum(-1, keepdim=True)


def _segment_forward(q, k, v, g, beta, state, scale, l2norm, save):
    """The chunks of one segment, layout (n, B, H, C, d), entering state
    (B * H, K, V). Returns the output (n, B, H, C, V), the leaving state and,
    with ``save``, what the backward needs."""
    n, B, H, C, K = k.shape
    V = v.shape[-1]
    if l2norm:
        rq = torch.rsqrt(_rowdot(q, q) + L2NORM_EPS)
        rk = torch.rsqrt(_rowdot(k, k) + L2NORM_EPS)
        q = q * (rq * scale)
        k = k * rk
    else:
        rq = rk = None
        q = q * scale
    G = g.cumsum(-1)
    eG = G.exp()
    gamma = eG[..., -1:]
    out_decay = (G[..., -1:] - G).exp()
    # D = e^{G_r - G_j} for j <= r, 0 above (the -inf keeps exponents finite)
    index = torch.arange(C, device=q.device)
    below = index[:, None] - index[None, :]  # r - j
    decay = (G[..., :, None] - G[..., None, :]).masked_fill(below < 0, -torch.inf).exp()
    # rows [beta k; s q] of one (2C, K) block per chunk: one matmul by K^T gives
    # A and the intra-chunk scores P. A keeps a diagonal that nothing reads (the
    # inverse reads the strictly lower part; its terms cancel in dG)
    k_beta = k * beta[..., None]
    kq = torch.cat((k_beta, q), -2)
    ap = (kq @ k.transpose(-1, -2)).unflatten(-2, (2, C)) * decay[..., None, :, :]
    a, p = ap.unbind(-3)
    t = unit_lower_inverse(a).view(n, B, H, C, C)
    # [U, W] = T [diag(beta) V, diag(beta e^G) K]
    uw = t @ torch.cat((v * beta[..., None], k_beta * eG[..., None]), -1)
    u, w = uw.split((V, K), -1)
    # M_C = (e^{G_C} I - K~^T W) M_0 + K~^T U
    k_out = k * out_decay[..., None]
    bias, kw = (k_out.transpose(-1, -2) @ uw).split((V, K), -1)
    eye = torch.eye(K, dtype=q.dtype, device=q.device)
    trans = (gamma[..., None] * eye - kw).reshape(n, B * H, K, K)
    s_in, state = recurrence(trans, bias.reshape(n, B * H, K, V), state)
    s_in = s_in.view(n, B, H, K, V)
    delta = _baddbmm(u, w, s_in, alpha=-1)
    qg = q * eG[..., None]
    o = _baddbmm(qg @ s_in, p, delta)
    saved = None
    if save:
        # the decay masked strictly lower (for A) and lower (for P)
        masks = torch.stack((below > 0, below >= 0)).to(q.dtype)
        saved = (q, k, v, beta, eG, gamma, out_decay, decay[..., None, :, :] * masks,
                 ap, t, w, k_out, trans, s_in, delta, qg, kq, rq, rk)
    return o, state, saved


def _segment_backward(saved, do, dstate, scale, l2norm):
    """Gradients of one segment (layout (n, B, H, C, d)) from the output's and
    the leaving state's; returns them and the entering state's gradient."""
    (q, k, v, beta, eG, gamma, out_decay, decay, ap, t, w, k_out, trans, s_in,
     delta, qg, kq, rq, rk) = saved
    n, B, H, C, K = k.shape
    V = v.shape[-1]
    p = ap[..., 1, :, :]
    x = p.transpose(-1, -2) @ do
    # adjoint recurrence dM_0 = (e^{G_C} I - K~^T W)^T dM_C + Q_g^T dO - W^T X
    res = _baddbmm(qg.transpose(-1, -2) @ do, w.transpose(-1, -2), x,
                   alpha=-1).reshape(n, B * H, K, V)
    trans_t = trans.transpose(-1, -2)
    dstates = [dstate]
    for i in range(n - 1, -1, -1):
        dstates.append(torch.baddbmm(res[i], trans_t[i], dstates[-1]))
    ds_out = torch.stack(dstates[n - 1::-1]).view(n, B, H, K, V)

    d_delta = _baddbmm(x, k_out, ds_out)
    dk_out = delta @ ds_out.transpose(-1, -2)
    dgamma = (s_in * ds_out).sum((-1, -2))[..., None]
    dqg = do @ s_in.transpose(-1, -2)
    neg_dv_beta = -(t.transpose(-1, -2) @ d_delta)
    dk_beta_g = neg_dv_beta @ s_in.transpose(-1, -2)
    # [dA; dP] = [-dV_beta; dO] Delta^T, then through the decay mask
    raw = (torch.cat((neg_dv_beta, do), -2) @ delta.transpose(-1, -2)).unflatten(
        -2, (2, C))
    z = (raw * ap).sum(-3)
    dG = z.sum(-1) - z.sum(-2)
    ef = (raw * decay).flatten(-3, -2)
    dkb_dq = ef @ k
    dk = ef.transpose(-1, -2) @ kq

    # fused multiply-adds into this function's own fresh tensors
    dq = torch.addcmul(dkb_dq[..., C:, :], dqg, eG[..., None])
    dG.addcmul_(eG, _rowdot(dqg, q)[..., 0])
    dv = neg_dv_beta * -beta[..., None]
    dk_beta = torch.addcmul(dkb_dq[..., :C, :], dk_beta_g, eG[..., None])
    dbeta = _rowdot(dk_beta, k) - _rowdot(neg_dv_beta, v)
    dG.addcmul_(beta * eG, _rowdot(dk_beta_g, k)[..., 0])
    dk.addcmul_(dk_beta, beta[..., None]).addcmul_(dk_out, out_decay[..., None])
    z_out = out_decay * _rowdot(dk_out, k)[..., 0]
    last = z_out.sum(-1, keepdim=True) + dgamma * gamma  # into G_C
    dG = dG - z_out + F.pad(last, (C - 1, 0))
    dg = dG.flip(-1).cumsum(-1).flip(-1)

    if l2norm:  # x / |x| backward: r (dy - y (y . dy)), with q = s y
        dq = dq * (rq * scale) - q * (rq / scale * _rowdot(q, dq))
        dk = (dk - k * _rowdot(k, dk)) * rk
    else:
        dq = dq * scale
    return (dq, dk, dv, dg, dbeta[..., 0]), dstates[n]


def _segment_inputs(tensors, start, stop, chunk, both, extra=0):
    """Slices [start, stop) of (B, T, H, ...) tensors (``both``: then, batched
    after them, those of the reversed sequences), zero-padded to whole chunks and
    ``extra`` more tokens (g = beta = k = 0 leaves the state unchanged), in
    chunk layout."""
    # a round-up, not (chunk - length % chunk) % chunk: the same number, but on
    # torch.export's symbolic sizes the nested Mod made its guards 15x slower
    # (InfiniteVL's tiny deploy case: 796 s -> 52 s)
    length = stop - start
    pad = (length + chunk - 1) // chunk * chunk - length + extra

    def take(x):
        part, T = x[:, start:stop], x.shape[1]
        if both:
            part = torch.cat((part, x[:, T - stop:T - start].flip(1)))
        if pad or is_tracing():  # F.pad copies even when it pads nothing
            part = F.pad(part, (0, 0) * (x.dim() - 2) + (0, pad))
        return to_chunks(part, chunk)
    return [take(x) for x in tensors]


def _add_segment(out, piece, start, stop, both):
    """One segment's (B or 2B, n, ...) result added into ``out`` (B, T, ...) in place: the
    forward sequences' result at [start, stop), the reversed ones' flipped back
    into [T - stop, T - start). The segments' results are never all held at once."""
    B, T = out.shape[:2]
    out[:, start:stop] += piece[:B]
    if both:
        out[:, T - stop:T - start] += piece[B:].flip(1)


def _forward(q, k, v, g, beta, state, scale, chunk, segment, l2norm, both,
             save):
    """Stream the segments; returns o (B, T, H, V), the final state (S, H, K, V)
    (S = 2B sequences with ``both``) and the saved tensors of every segment."""
    B, T, H, K = k.shape
    V, S = v.shape[-1], B * (1 + both)
    state = (q.new_zeros(S * H, K, V) if state is None else
             state.reshape(S * H, K, V))
    out, saved = None, []
    # traced: one segment (plain ops, no in-place writes); under dynamo a chunk
    # more: two at least, so that torch.export keeps the chunk count symbolic (it
    # specialises sizes of 1)
    extra = chunk * torch.compiler.is_compiling()
    segments = [(0, T)] if is_tracing() else spans(T, segment)
    for start, stop in segments:
        qs, ks, vs, gs, betas = _segment_inputs((q, k, v, g, beta), start, stop,
                                                chunk, both, extra)
        o, state, kept = _segment_forward(qs, ks, vs, gs, betas, state, scale,
                                          l2norm, save)
        o = from_chunks(o)[:, :stop - start]
        if len(segments) == 1:
            out = o[:B] + o[B:].flip(1) if both else o
        else:
            out = o.new_zeros(B, T, H, V) if out is None else out
            _add_segment(out, o, start, stop, both)
        saved.append(kept)
    return out, state.view(S, H, K, V), saved


class ChunkGatedDeltaRule(torch.autograd.Function):
    """The streamed chunk form with its hand-written backward (module docstring)."""

    @staticmethod
    def forward(ctx, q, k, v, g, beta, initial_state, scale, chunk, segment,
                l2norm, both):
        with no_autocast(q.device.type):  # the inputs are already fp32/fp64
            o, state, saved = _forward(q, k, v, g, beta, initial_state, scale, chunk,
                                       segment, l2norm, both, save=True)
        ctx.save_for_backward(*(x for kept in saved for x in kept))
        ctx.config = (len(saved[0]), scale, chunk, segment, l2norm, both,
                      initial_state is not None, k.shape[1])
        return o, state

    @staticmethod
    @once_differentiable
    def backward(ctx, do, dstate):
        per_segment, scale, chunk, segment, l2norm, both, has_initial_state, T = \
            ctx.config
        flat = ctx.saved_tensors
        saved = [flat[i:i + per_segment] for i in range(0, len(flat), per_segment)]
        B, _, H, V = do.shape
        K, S = saved[0][1].shape[-1], B * (1 + both)
        dstate = (do.new_zeros(S * H, K, V) if dstate is None else
                  dstate.reshape(S * H, K, V))
        with no_autocast(do.device.type):
            grads = None
            for (start, stop), kept in reversed(list(zip(spans(T, segment), saved))):
                (dos, ) = _segment_inputs((do, ), start, stop, chunk, both)
                seg_grads, dstate = _segment_backward(kept, dos, dstate, scale, l2norm)
                seg_grads = [from_chunks(x)[:, :stop - start] for x in seg_grads]
                grads = grads or [x.new_zeros(B, T, *x.shape[2:]) for x in seg_grads]
                for grad, piece in zip(grads, seg_grads):
                    _add_segment(grad, piece, start, stop, both)
        dq, dk, dv, dg, dbeta = grads
        dh0 = dstate.view(S, H, K, V) if has_initial_state else None
        return dq, dk, dv, dg, dbeta, dh0, None, None, None, None, None


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None,
                           output_final_state=False,
                           use_qk_l2norm_in_kernel=False, chunk_size=32,
                           segment_size=1024, bidirectional=False):
    """Gated delta rule over chunks of ``chunk_size`` tokens (a power of two),
    streamed ``segment_size`` tokens at a time (rounded up to whole chunks); see
    the module docstring, and :func:`mmhybrid.ops.gated_delta_rule` for the
    other arguments.

    ``chunk_size`` 32 was the fastest of 16/32/64 on the CPU at 784 and 3136
    tokens (within 5% of 16 at 196; one comparison, loaded machine); fla's GPU
    kernels use 64. Sequences shorter than a chunk use the next power of two.
    """
    if chunk_size < 1 or chunk_size & (chunk_size - 1):
        raise ValueError(f'chunk_size must be a power of two, got {chunk_size}')
    if segment_size < 1:
        raise ValueError(f'segment_size must be positive, got {segment_size}')
    B, T, H, K = k.shape
    V = v.shape[-1]
    scale = K**-0.5 if scale is None else scale
    out_dtype = v.dtype
    dtype = acc_dtype(v)
    q, k, v, g, beta = (x.to(dtype) for x in (q, k, v, g, beta))
    if initial_state is not None:
        initial_state = initial_state.to(dtype)
    if T == 0:
        state = (q.new_zeros(B * (1 + bidirectional), H, K, V)
                 if initial_state is None else initial_state)
        return (v.new_zeros(B, 0, H, V).to(out_dtype),
                state if output_final_state else None)
    traced = is_tracing()  # a fixed chunk and plain ops, see the module docstring
    chunk = chunk_size
    while not traced and chunk > 1 and chunk // 2 >= T:  # short: less padding
        chunk //= 2
    segment = -(-segment_size // chunk) * chunk
    args = (q, k, v, g, beta, initial_state, scale, chunk, segment,
            use_qk_l2norm_in_kernel, bidirectional)
    if (torch.is_grad_enabled() and not traced and any(
            x is not None and x.requires_grad for x in args[:6])):
        o, state = ChunkGatedDeltaRule.apply(*args)
    else:
        with no_autocast(q.device.type):
            o, state, _ = _forward(*args, save=False)
    return o.to(out_dtype), state if output_final_state else None
