r"""Linear InfSA (Eq. 16-21) as Triton kernels: two passes forward, two backward.

Same math and notation as :mod:`.linear`. Each kernel streams one (batch, head)
slice of the tokens in ``BLOCK_N``-row tiles, reduces in float32 (float64 for
float64 inputs) and writes one partial result per program; the O(d) partials are
summed on the host between passes (the ReLU of Eq. 19 needs the complete central
query before any score, so two passes is the floor):

* forward 1 (``Q``): :math:`E = \sum e_i`, :math:`m = \sum e_i Q_i` -> :math:`\bar q`;
* forward 2 (``K, V``): :math:`S = \sum s_j`, :math:`P = \sum s_j V_j` -> :math:`h`;
* backward 1 (``K, V``): writes :math:`dV`, :math:`dK` and sums :math:`d\bar q`;
* backward 2 (``Q``): writes :math:`dQ` (adding :math:`dK` in place when Q = K).

Every input is read once per pass and every gradient written once; nothing of
size N x d is stored between forward and backward. Inputs may be any strided
(B, H, N, d) view (e.g. head views of a (B, N, C) projection): no copies.
Custom ops ``mmhybrid::linear_infsa_forward`` / ``_backward`` (:mod:`..triton_tiles`).
"""
from typing import Optional

import torch
import triton
import triton.language as tl

from ..triton_tiles import (TokenTiling, acc_dtype, head_pointer, load_tile,  # noqa: F401
                            register_autograd, require_usable, store_tile,
                            triton_unusable_reason)


@triton.jit
def _energy_kernel(q_ptr, part_e_ptr, part_m_ptr, N, D, H,
                   sq_b, sq_h, sq_n, sq_d, rows_per_program,
                   ACC: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """Partial ``sum_i e_i`` and ``sum_i e_i Q_i`` over this program's rows."""
    pid_bh, pid_n = tl.program_id(0), tl.program_id(1)
    q_ptr = head_pointer(q_ptr, pid_bh, H, sq_b, sq_h)
    cols = tl.arange(0, BLOCK_D)
    energy = tl.zeros([BLOCK_N], ACC)
    moment = tl.zeros([BLOCK_D], ACC)
    for start in range(0, rows_per_program, BLOCK_N):
        rows = pid_n * rows_per_program + start + tl.arange(0, BLOCK_N)
        q = load_tile(q_ptr, rows, cols, N, D, sq_n, sq_d, ACC)
        e = tl.sqrt(tl.sum(q * q, axis=1))
        energy += e
        moment += tl.sum(e[:, None] * q, axis=0)
    part = pid_bh * tl.num_programs(1) + pid_n
    tl.store(part_e_ptr + part, tl.sum(energy, axis=0))
    tl.store(part_m_ptr + part * D + cols, moment, mask=cols < D)


@triton.jit
def _context_kernel(k_ptr, v_ptr, central_ptr, part_s_ptr, part_p_ptr, N, D, DV, H,
                    sk_b, sk_h, sk_n, sk_d, sv_b, sv_h, sv_n, sv_d, rows_per_program,
                    ACC: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                    BLOCK_DV: tl.constexpr):
    """Partial ``sum_j s_j`` and ``sum_j s_j V_j``, ``s_j = [qbar . K_j]_+``."""
    pid_bh, pid_n = tl.program_id(0), tl.program_id(1)
    k_ptr = head_pointer(k_ptr, pid_bh, H, sk_b, sk_h)
    v_ptr = head_pointer(v_ptr, pid_bh, H, sv_b, sv_h)
    cols, cols_v = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    central = tl.load(central_ptr + pid_bh * D + cols, mask=cols < D, other=0.)
    score = tl.zeros([BLOCK_N], ACC)
    pooled = tl.zeros([BLOCK_DV], ACC)
    for start in range(0, rows_per_program, BLOCK_N):
        rows = pid_n * rows_per_program + start + tl.arange(0, BLOCK_N)
        k = load_tile(k_ptr, rows, cols, N, D, sk_n, sk_d, ACC)
        s = tl.maximum(tl.sum(k * central[None, :], axis=1), 0.)
        v = load_tile(v_ptr, rows, cols_v, N, DV, sv_n, sv_d, ACC)
        score += s
        pooled += tl.sum(s[:, None] * v, axis=0)
    part = pid_bh * tl.num_programs(1) + pid_n
    tl.store(part_s_ptr + part, tl.sum(score, axis=0))
    tl.store(part_p_ptr + part * DV + cols_v, pooled, mask=cols_v < DV)


@triton.jit
def _key_value_grad_kernel(k_ptr, v_ptr, central_ptr, grad_ptr, grad_h_ptr,
                           dk_ptr, dv_ptr, part_dc_ptr, N, D, DV, H,
                           sk_b, sk_h, sk_n, sk_d, sv_b, sv_h, sv_n, sv_d,
                           sdk_b, sdk_h, sdk_n, sdk_d, sdv_b, sdv_h, sdv_n, sdv_d,
                           rows_per_program, ACC: tl.constexpr, BLOCK_N: tl.constexpr,
                           BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    """``dV_j = s_j g``, ``dz_j = [s_j > 0](V_j . g - h . g)``, ``dK_j = dz_j qbar``
    and the partial ``sum_j dz_j K_j``, with ``g = G / (S + eps)``."""
    pid_bh, pid_n = tl.program_id(0), tl.program_id(1)
    k_ptr = head_pointer(k_ptr, pid_bh, H, sk_b, sk_h)
    v_ptr = head_pointer(v_ptr, pid_bh, H, sv_b, sv_h)
    dk_ptr = head_pointer(dk_ptr, pid_bh, H, sdk_b, sdk_h)
    dv_ptr = head_pointer(dv_ptr, pid_bh, H, sdv_b, sdv_h)
    cols, cols_v = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    central = tl.load(central_ptr + pid_bh * D + cols, mask=cols < D, other=0.)
    grad = tl.load(grad_ptr + pid_bh * DV + cols_v, mask=cols_v < DV, other=0.)
    grad_h = tl.load(grad_h_ptr + pid_bh)
    grad_central = tl.zeros([BLOCK_D], ACC)
    for start in range(0, rows_per_program, BLOCK_N):
        rows = pid_n * rows_per_program + start + tl.arange(0, BLOCK_N)
        k = load_tile(k_ptr, rows, cols, N, D, sk_n, sk_d, ACC)
        v = load_tile(v_ptr, rows, cols_v, N, DV, sv_n, sv_d, ACC)
        z = tl.sum(k * central[None, :], axis=1)
        store_tile(dv_ptr, tl.maximum(z, 0.)[:, None] * grad[None, :], rows, cols_v,
                   N, DV, sdv_n, sdv_d)
        dz = tl.where(z > 0, tl.sum(v * grad[None, :], axis=1) - grad_h, 0.)
        store_tile(dk_ptr, dz[:, None] * central[None, :], rows, cols, N, D,
                   sdk_n, sdk_d)
        grad_central += tl.sum(dz[:, None] * k, axis=0)
    part = pid_bh * tl.num_programs(1) + pid_n
    tl.store(part_dc_ptr + part * D + cols, grad_central, mask=cols < D)


@triton.jit
def _query_grad_kernel(q_ptr, grad_m_ptr, grad_e_ptr, dq_ptr, N, D, H,
                       sq_b, sq_h, sq_n, sq_d, sdq_b, sdq_h, sdq_n, sdq_d,
                       rows_per_program, ACCUMULATE: tl.constexpr, ACC: tl.constexpr,
                       BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """``dQ_i = e_i dm + (Q_i . dm + dE) Q_i / e_i`` (+ the ``dK`` already in dQ)."""
    pid_bh, pid_n = tl.program_id(0), tl.program_id(1)
    q_ptr = head_pointer(q_ptr, pid_bh, H, sq_b, sq_h)
    dq_ptr = head_pointer(dq_ptr, pid_bh, H, sdq_b, sdq_h)
    cols = tl.arange(0, BLOCK_D)
    grad_m = tl.load(grad_m_ptr + pid_bh * D + cols, mask=cols < D, other=0.)
    grad_e = tl.load(grad_e_ptr + pid_bh)
    for start in range(0, rows_per_program, BLOCK_N):
        rows = pid_n * rows_per_program + start + tl.arange(0, BLOCK_N)
        q = load_tile(q_ptr, rows, cols, N, D, sq_n, sq_d, ACC)
        e = tl.sqrt(tl.sum(q * q, axis=1))
        coef = tl.sum(q * grad_m[None, :], axis=1) + grad_e
        coef = tl.where(e > 0, coef / tl.where(e > 0, e, 1.), 0.)
        dq = e[:, None] * grad_m[None, :] + coef[:, None] * q
        if ACCUMULATE:
            dq += load_tile(dq_ptr, rows, cols, N, D, sdq_n, sdq_d, ACC)
        store_tile(dq_ptr, dq, rows, cols, N, D, sdq_n, sdq_d)


@torch.library.custom_op('mmhybrid::linear_infsa_forward', mutates_args=())
def linear_infsa_forward(q: torch.Tensor, k: Optional[torch.Tensor], v: torch.Tensor,
                         eps: float, block_n: Optional[int] = None,
                         rows_per_program: Optional[int] = None
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                    torch.Tensor, torch.Tensor]:
    """Triton forward: the context ``h`` (B, H, 1, dv) in the dtype of ``v``, and
    what backward needs: energy norm (B*H), central query (B*H, d), score norm
    (B*H), the context in the accumulation dtype (B*H, dv). ``k=None``: tied."""
    keys = q if k is None else k
    B, H, N, D = q.shape
    DV = v.shape[-1]
    cfg = TokenTiling(q, (D, DV), block_n, rows_per_program)
    part_e, part_m = cfg.partials(), cfg.partials(D)
    _energy_kernel[cfg.grid](
        q, part_e, part_m, N, D, H, *q.stride(), **cfg.launch)
    energy_norm = part_e.sum(1) + eps
    central = (part_m.sum(1) / energy_norm[:, None]).contiguous()
    part_s, part_p = cfg.partials(), cfg.partials(DV)
    _context_kernel[cfg.grid](
        keys, v, central, part_s, part_p, N, D, DV, H, *keys.stride(),
        *v.stride(), BLOCK_DV=cfg.blocks[1], **cfg.launch)
    score_norm = part_s.sum(1) + eps
    context = part_p.sum(1) / score_norm[:, None]
    return (context.view(B, H, 1, DV).to(v.dtype, copy=True), energy_norm, central,
            score_norm, context)


@linear_infsa_forward.register_fake
def _(q, k, v, eps, block_n=None, rows_per_program=None):
    (B, H, N, D), DV, acc = q.shape, v.shape[-1], acc_dtype(q)
    return (v.new_empty(B, H, 1, DV), q.new_empty(B * H, dtype=acc),
            q.new_empty(B * H, D, dtype=acc), q.new_empty(B * H, dtype=acc),
            q.new_empty(B * H, DV, dtype=acc))


@torch.library.custom_op('mmhybrid::linear_infsa_backward', mutates_args=())
def linear_infsa_backward(q: torch.Tensor, k: Optional[torch.Tensor], v: torch.Tensor,
                          grad_context: torch.Tensor, energy_norm: torch.Tensor,
                          central: torch.Tensor, score_norm: torch.Tensor,
                          context: torch.Tensor, block_n: Optional[int] = None,
                          rows_per_program: Optional[int] = None
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Triton backward: (dq, dk, dv); with ``k=None`` dq holds both and dk is an
    empty tensor."""
    keys = q if k is None else k
    B, H, N, D = q.shape
    DV = v.shape[-1]
    cfg = TokenTiling(q, (D, DV), block_n, rows_per_program)
    grad = grad_context.reshape(cfg.BH, DV).to(cfg.acc) / score_norm[:, None]
    grad_h = (grad * context).sum(-1)
    grad_q, grad_v = torch.empty_like(q), torch.empty_like(v)
    grad_k = grad_q if k is None else torch.empty_like(k)
    part_dc = cfg.partials(D)
    _key_value_grad_kernel[cfg.grid](
        keys, v, central, grad.contiguous(), grad_h, grad_k, grad_v, part_dc,
        N, D, DV, H, *keys.stride(), *v.stride(), *grad_k.stride(),
        *grad_v.stride(), BLOCK_DV=cfg.blocks[1], **cfg.launch)
    grad_m = (part_dc.sum(1) / energy_norm[:, None]).contiguous()
    grad_e = -(grad_m * central).sum(-1)
    _query_grad_kernel[cfg.grid](
        q, grad_m, grad_e, grad_q, N, D, H, *q.stride(), *grad_q.stride(),
        ACCUMULATE=k is None, **cfg.launch)
    return grad_q, q.new_empty(0) if k is None else grad_k, grad_v


@linear_infsa_backward.register_fake
def _(q, k, v, grad_context, energy_norm, central, score_norm, context, block_n=None,
      rows_per_program=None):
    return (torch.empty_like(q), q.new_empty(0) if k is None else torch.empty_like(k),
            torch.empty_like(v))


register_autograd(linear_infsa_forward, linear_infsa_backward, tensors=3,
                  saved_outputs=1, options=2)


def triton_linear_infsa_context(q, k, v, eps=1e-6, block_n=None,
                                rows_per_program=None):
    """:func:`mmhybrid.ops.infsa.linear_infsa_context` with the fused passes, on
    q, k, v of one dtype; ``block_n``, ``rows_per_program`` force the tiling (tests)."""
    require_usable('linear_infsa', q, k, v)
    return linear_infsa_forward(q, None if k is q else k, v, eps, block_n,
                                rows_per_program)[0]
