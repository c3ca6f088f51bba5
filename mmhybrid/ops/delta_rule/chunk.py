r"""Gated delta rule in chunks with plain PyTorch ops (the WY / UT form).

Inside a chunk of C tokens, with ``G_r = sum_{i<=r} g_i`` (cumulative log-decay
from the chunk start) and ``M_0`` the state entering the chunk, unrolling
``M_r = e^{g_r} M_{r-1} + beta_r k_r (v_r - e^{g_r} M_{r-1}^T k_r)^T`` gives

.. math::
    M_r = e^{G_r} M_0 + \sum_{j \le r} e^{G_r - G_j} k_j \delta_j^T, \qquad
    (I + A) \Delta = \mathrm{diag}(\beta) (V - \mathrm{diag}(e^{G}) K M_0),

where ``A_{rj} = beta_r e^{G_r - G_j} k_r^T k_j`` for ``j < r`` (strictly lower
triangular). So ``Delta = U - W M_0`` with ``U = (I + A)^{-1} diag(beta) V`` and
``W = (I + A)^{-1} diag(beta e^{G}) K`` (the UT transform of the WY representation),
computed for all chunks at once (one batched unit-triangular inverse). Then

.. math::
    O = s\,(\mathrm{diag}(e^{G}) Q M_0 + (Q K^T \odot D) \Delta), \qquad
    M_C = e^{G_C} M_0 + (\mathrm{diag}(e^{G_C - G}) K)^T \Delta,

with ``D_{rj} = e^{G_r - G_j}`` for ``j <= r`` and 0 above. Only ``Delta`` and
the state update (two small matmuls per chunk) run sequentially over chunks; the
outputs are two batched matmuls over all chunks afterwards. Every exponent is
<= 0, so nothing overflows; memory is O(T C) per head plus one K x V state per
chunk, kept for autograd. Inputs in fp16/bf16 are computed in fp32.
"""
import math

import torch
import torch.nn.functional as F

from .naive import l2norm


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None,
                           output_final_state=False,
                           use_qk_l2norm_in_kernel=False, chunk_size=32):
    """Gated delta rule over chunks of ``chunk_size`` tokens; see the module
    docstring, and :func:`mmhybrid.ops.gated_delta_rule` for the arguments.

    ``chunk_size`` 32 was the fastest of 16/32/64/128 on the CPU (forward +
    backward, T = 256 ... 4096, heads of 32); fla's GPU kernels use 64.
    """
    B, T, H, K = k.shape
    V = v.shape[-1]
    scale = K**-0.5 if scale is None else scale
    out_dtype = v.dtype
    dtype = torch.promote_types(out_dtype, torch.float32)
    q, k = q.to(dtype), k.to(dtype)
    if use_qk_l2norm_in_kernel:
        q, k = l2norm(q), l2norm(k)
    # (B, H, T, d) and (B, H, T)
    q, k, v = (x.to(dtype).transpose(1, 2) for x in (q, k, v))
    g, beta = (x.to(dtype).transpose(1, 2) for x in (g, beta))
    state = (q.new_zeros(B, H, K, V) if initial_state is None else
             initial_state.to(dtype))
    if T == 0:
        return (v.new_zeros(B, 0, H, V).to(out_dtype),
                state if output_final_state else None)

    C = min(chunk_size, T)
    n = math.ceil(T / C)
    pad = n * C - T
    if pad:
        # k = v = beta = g = 0: padded tokens leave the state untouched
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        g, beta = (F.pad(x, (0, pad)) for x in (g, beta))
    q, k, v = (x.reshape(B, H, n, C, -1) for x in (q, k, v))
    g, beta = (x.reshape(B, H, n, C) for x in (g, beta))

    G = g.cumsum(-1)
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    decay = (G[..., :, None] - G[..., None, :]).masked_fill(~causal, -math.inf).exp()
    q = q * scale
    k_beta = k * beta[..., None]
    # one matmul for A (rows :C) and the intra-chunk scores Q K^T (rows C:)
    A, intra = (torch.cat((k_beta, q), dim=-2) @ k.transpose(-1, -2)).view(
        B, H, n, 2, C, C).mul(decay[:, :, :, None]).unbind(3)
    # A is used below its diagonal only: solve_triangular reads the strict lower
    # part and takes the diagonal as 1 (its gradient is projected likewise)
    eye = torch.eye(C, dtype=dtype, device=q.device)
    inverse = torch.linalg.solve_triangular(A, eye, upper=False,
                                            unitriangular=True)
    u = inverse @ (v * beta[..., None])
    w = inverse @ (k_beta * G.exp()[..., None])
    k_out = k * (G[..., -1:] - G).exp()[..., None]
    chunk_decay = G[..., -1].exp()[..., None, None]

    # the only sequential part; unbind once, since indexing inside the loop would
    # make autograd zero-fill a full-size gradient per chunk (quadratic in T)
    states, deltas = [], []
    for u_i, w_i, k_i, decay_i in zip(u.unbind(2), w.unbind(2), k_out.unbind(2),
                                      chunk_decay.unbind(2)):
        states.append(state)
        delta = u_i - w_i @ state
        deltas.append(delta)
        state = state * decay_i + k_i.transpose(-1, -2) @ delta
    o = ((q * G.exp()[..., None]) @ torch.stack(states, dim=2) +
         intra @ torch.stack(deltas, dim=2))
    o = o.reshape(B, H, n * C, V)[:, :, :T].transpose(1, 2)
    return o.to(out_dtype), state if output_final_state else None
