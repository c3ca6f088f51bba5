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
recurrence ``M_C = A_c M_0 + B_c`` (one matmul per chunk) is a batched matmul over
all chunks at once. Every exponent is <= 0, so nothing overflows.

The backward pass is written by hand (:class:`ChunkGatedDeltaRule`): autograd
through the chunk loop would keep every intermediate and launch several small
kernels per chunk. It runs the adjoint recurrence ``dM_0 = A_c^T dM_C + R_c``
(one matmul per chunk, in reverse) and batches the rest; two identities keep it
short: ``T^T`` is needed only as ``dV_beta = T^T dDelta``, and then
``dA = -dV_beta Delta^T`` (``Delta = U - W M_0``). The triangular inverse is
:func:`unit_lower_inverse`. Inputs in fp16/bf16 are computed in fp32.
"""
import functools

import torch
from torch.autograd.function import once_differentiable

from .naive import L2NORM_EPS


def unit_lower_inverse(a):
    """``(I + tril(a, -1))^{-1}`` for a batch (nb, C, C), C a power of two.

    Block doubling: with the inverses of the diagonal blocks of size s known,
    those of size 2s are ``[[T11, 0], [-T22 A21 T11, T22]]``. It reads only the
    strictly lower part of ``a`` and costs two small batched matmuls per level;
    on the CPU it measured about as fast as ``torch.linalg.solve_triangular``
    (300-1200 matrices of 32, within the noise of a shared machine).
    """
    nb, C, _ = a.shape
    if C & (C - 1):
        raise ValueError(f'unit_lower_inverse needs a power-of-two size, got {C}')
    sb, sr, sc = a.stride()
    out = a.new_zeros(nb, C, C)
    out.diagonal(dim1=-2, dim2=-1).fill_(1)
    size = 1
    while size < C:
        shape = (nb, C // (2 * size), size, size)
        block = (C * C, 2 * size * (C + 1), C, 1)
        a21 = a.as_strided(shape, (sb, 2 * size * (sr + sc), sr, sc),
                           a.storage_offset() + size * sr)
        t21 = out.as_strided(shape, block, size * C)
        if size == 1:
            torch.neg(a21, out=t21)
        else:
            t11 = out.as_strided(shape, block, 0)
            t22 = out.as_strided(shape, block, size * C + size)
            t21.copy_(t22 @ a21 @ t11.neg())
        size *= 2
    return out


def to_chunks(x, chunk, out=None):
    """(B, T, H, ...) -> (n, B, H, chunk, ...), zero-padded to whole chunks."""
    B, T, H = x.shape[:3]
    n, full = -(-T // chunk), T // chunk
    if out is None:
        out = x.new_empty(n, B, H, chunk, *x.shape[3:])
    order = (1, 0, 3, 2) + tuple(range(4, x.dim() + 1))
    out[:full].copy_(x[:, :full * chunk].unflatten(1, (full, chunk)).permute(order))
    if full < n:
        tail = T - full * chunk
        out[full, :, :, :tail].copy_(x[:, full * chunk:].transpose(1, 2))
        out[full, :, :, tail:].zero_()
    return out


def from_chunks(x, T):
    """(n, B, H, chunk, ...) -> (B, T, H, ...), dropping the padding."""
    n, B, H, chunk = x.shape[:4]
    full = T // chunk
    out = x.new_empty(B, T, H, *x.shape[4:])
    order = (1, 0, 3, 2) + tuple(range(4, x.dim()))
    out[:, :full * chunk].unflatten(1, (full, chunk)).copy_(x[:full].permute(order))
    if full < n:
        out[:, full * chunk:].copy_(x[full, :, :, :T - full * chunk].transpose(1, 2))
    return out


def _without_autocast(method):
    """Run a forward/backward in the dtype of its tensors, whatever autocast says
    (the inputs are already fp32/fp64; in-place ``out=`` ops need one dtype)."""
    @functools.wraps(method)
    def wrapper(ctx, first, *args):
        with torch.autocast(first.device.type, enabled=False):
            return method(ctx, first, *args)
    return wrapper


def _rowdot(a, b):
    """``sum(a * b, -1)``, keeping the last dim."""
    return (a * b).sum(-1, keepdim=True)


class ChunkGatedDeltaRule(torch.autograd.Function):
    """The chunked gated delta rule with a hand-written chunked backward.

    Internal layout: (n chunks, B, H, C, d); the batched matmuls flatten the
    leading dims, the two recurrences run over (n, B * H, ...) slices.
    """

    @staticmethod
    @_without_autocast
    def forward(ctx, q, k, v, g, beta, initial_state, scale, chunk, l2norm):
        B, T, H, K = k.shape
        V = v.shape[-1]
        n, C = -(-T // chunk), chunk
        # rows [beta k; s q] of one (2C, K) block per chunk: one matmul by K^T
        # gives A and the intra-chunk scores
        kq = q.new_empty(n, B, H, 2 * C, K)
        qs = to_chunks(q, C, out=kq[..., C:, :])
        ks, vs, gs, betas = (to_chunks(x, C) for x in (k, v, g, beta))
        if l2norm:
            rq = torch.rsqrt(_rowdot(qs, qs) + L2NORM_EPS)
            rk = torch.rsqrt(_rowdot(ks, ks) + L2NORM_EPS)
            qs.mul_(rq * scale)
            ks.mul_(rk)
        else:
            rq = rk = None
            qs.mul_(scale)
        k_beta = torch.mul(ks, betas[..., None], out=kq[..., :C, :])

        G = gs.cumsum(-1)
        eG = G.exp()
        gamma = eG[..., -1:]
        out_decay = (G[..., -1:] - G).exp()
        lower = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
        decay = (G[..., :, None] - G[..., None, :]).masked_fill_(~lower, -torch.inf)
        decay = decay.exp_()
        ap = (kq @ ks.transpose(-1, -2)).unflatten(-2, (2, C))
        ap.mul_(decay[..., None, :, :])
        a, p = ap.unbind(-3)
        a.diagonal(dim1=-2, dim2=-1).zero_()
        t = unit_lower_inverse(a.flatten(0, 2)).view(n, B, H, C, C)

        # [U, W] = T [diag(beta) V, diag(beta e^G) K]
        rhs = q.new_empty(n, B, H, C, V + K)
        torch.mul(vs, betas[..., None], out=rhs[..., :V])
        torch.mul(k_beta, eG[..., None], out=rhs[..., V:])
        uw = t @ rhs
        u, w = uw[..., :V], uw[..., V:]
        # M_C = (e^{G_C} I - K~^T W) M_0 + K~^T U
        k_out = ks * out_decay[..., None]
        recur = k_out.transpose(-1, -2) @ uw
        bias, trans = recur[..., :V], recur[..., V:].neg_()
        trans.diagonal(dim1=-2, dim2=-1).add_(gamma)
        states = q.new_empty(n + 1, B * H, K, V)
        if initial_state is None:
            states[0].zero_()
        else:
            states[0].copy_(initial_state.reshape(B * H, K, V))
        for i, (bias_i, trans_i) in enumerate(zip(bias.flatten(1, 2),
                                                   trans.flatten(1, 2))):
            torch.baddbmm(bias_i, trans_i, states[i], out=states[i + 1])
        s_in = states[:n].view(n, B, H, K, V)
        delta = torch.baddbmm(u.flatten(0, 2), w.flatten(0, 2), s_in.flatten(0, 2),
                              alpha=-1).view(n, B, H, C, V)
        qg = qs * eG[..., None]
        o = qg @ s_in
        o.flatten(0, 2).baddbmm_(p.flatten(0, 2), delta.flatten(0, 2))

        ctx.save_for_backward(kq, ks, vs, betas, G, eG, gamma, out_decay, decay, ap,
                              t, uw, k_out, trans, states, delta, qg, rq, rk)
        ctx.config = (scale, C, l2norm, initial_state is not None)
        return from_chunks(o, T), states[n].view(B, H, K, V).clone()

    @staticmethod
    @once_differentiable
    @_without_autocast
    def backward(ctx, do, dstate):
        (kq, ks, vs, betas, G, eG, gamma, out_decay, decay, ap, t, uw, k_out, trans,
         states, delta, qg, rq, rk) = ctx.saved_tensors
        scale, C, l2norm, has_initial_state = ctx.config
        n, B, H, _, K = ks.shape
        V, T = vs.shape[-1], do.shape[1]
        qs, p, w = kq[..., C:, :], ap[..., 1, :, :], uw[..., V:]
        s_in = states[:n].view(n, B, H, K, V)

        # rows [-T^T dDelta; dO] of one (2C, V) block per chunk
        buf = do.new_empty(n, B, H, 2 * C, V)
        dos = to_chunks(do, C, out=buf[..., C:, :])
        x = p.transpose(-1, -2) @ dos
        y = qg.transpose(-1, -2) @ dos
        # adjoint recurrence dM_0 = (e^{G_C} I - K~^T W)^T dM_C + Q_g^T dO - W^T X
        res = torch.baddbmm(y.flatten(0, 2), w.transpose(-1, -2).flatten(0, 2),
                            x.flatten(0, 2), alpha=-1).view(n, B * H, K, V)
        dstates = do.new_empty(n + 1, B * H, K, V)
        if dstate is None:
            dstates[n].zero_()
        else:
            dstates[n].copy_(dstate.reshape(B * H, K, V))
        trans_t = trans.transpose(-1, -2).flatten(1, 2)
        for i in reversed(range(n)):
            torch.baddbmm(res[i], trans_t[i], dstates[i + 1], out=dstates[i])
        ds_out = dstates[1:].view(n, B, H, K, V)

        d_delta = torch.baddbmm(x.flatten(0, 2), k_out.flatten(0, 2),
                                ds_out.flatten(0, 2)).view(n, B, H, C, V)
        dk_out = delta @ ds_out.transpose(-1, -2)
        dgamma = (s_in * ds_out).sum((-1, -2))[..., None]
        dqg = dos @ s_in.transpose(-1, -2)
        neg_dv_beta = buf[..., :C, :]
        torch.matmul(t.transpose(-1, -2), d_delta, out=neg_dv_beta).neg_()
        dk_beta_g = neg_dv_beta @ s_in.transpose(-1, -2)
        # [dA; dP] = [-dV_beta; dO] Delta^T, before the decay mask
        raw = (buf @ delta.transpose(-1, -2)).unflatten(-2, (2, C))
        z = (raw * ap).sum(-3)
        dG = z.sum(-1) - z.sum(-2)
        ef = raw.mul_(decay[..., None, :, :])
        ef[..., 0, :, :].diagonal(dim1=-2, dim2=-1).zero_()
        ef = ef.flatten(-3, -2)
        dkb_dq = ef @ ks
        dk = ef.transpose(-1, -2) @ kq

        dq = dkb_dq[..., C:, :].addcmul_(dqg, eG[..., None])
        dG += eG * _rowdot(dqg, qs)[..., 0]
        dv = neg_dv_beta * -betas[..., None]
        dbeta = -_rowdot(neg_dv_beta, vs)
        r1 = _rowdot(dk_beta_g, ks)[..., 0]
        dk_beta = dkb_dq[..., :C, :].addcmul_(dk_beta_g, eG[..., None])
        dbeta += _rowdot(dk_beta, ks)
        dG += betas * eG * r1
        dk.addcmul_(dk_beta, betas[..., None])
        dk.addcmul_(dk_out, out_decay[..., None])
        z_out = out_decay * _rowdot(dk_out, ks)[..., 0]
        dG -= z_out
        dG[..., -1:] += z_out.sum(-1, keepdim=True) + dgamma * gamma
        dg = dG.flip(-1).cumsum(-1).flip(-1)

        if l2norm:  # x / |x| backward: r (dy - y (y . dy)), with qs = s y
            dq = dq * (rq * scale) - qs * (rq / scale * _rowdot(qs, dq))
            dk = (dk - ks * _rowdot(ks, dk)) * rk
        else:
            dq = dq * scale
        dh0 = dstates[0].view(B, H, K, V) if has_initial_state else None
        return (from_chunks(dq, T), from_chunks(dk, T), from_chunks(dv, T),
                from_chunks(dg, T), from_chunks(dbeta[..., 0], T), dh0,
                None, None, None)


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None,
                           output_final_state=False,
                           use_qk_l2norm_in_kernel=False, chunk_size=32):
    """Gated delta rule over chunks of ``chunk_size`` tokens (a power of two);
    see the module docstring, and :func:`mmhybrid.ops.gated_delta_rule` for the
    arguments.

    ``chunk_size`` 32 was the fastest of 16/32/64 on the CPU at 784 and 3136
    tokens (within 5% of 16 at 196; one comparison, loaded machine); fla's GPU
    kernels use 64. Sequences shorter than a chunk use the next power of two.
    """
    if chunk_size < 1 or chunk_size & (chunk_size - 1):
        raise ValueError(f'chunk_size must be a power of two, got {chunk_size}')
    B, T, H, K = k.shape
    V = v.shape[-1]
    scale = K**-0.5 if scale is None else scale
    out_dtype = v.dtype
    dtype = torch.promote_types(out_dtype, torch.float32)
    q, k, v, g, beta = (x.to(dtype) for x in (q, k, v, g, beta))
    if initial_state is not None:
        initial_state = initial_state.to(dtype)
    if T == 0:
        state = (q.new_zeros(B, H, K, V) if initial_state is None else
                 initial_state)
        return (v.new_zeros(B, 0, H, V).to(out_dtype),
                state if output_final_state else None)
    chunk = min(chunk_size, 1 << (T - 1).bit_length())
    o, state = ChunkGatedDeltaRule.apply(q, k, v, g, beta, initial_state, scale,
                                         chunk, use_qk_l2norm_in_kernel)
    return o.to(out_dtype), state if output_final_state else None
