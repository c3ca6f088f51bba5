r"""EFFATT (ELFATT's global head, Eq. 8) as Triton kernels: two passes each way.

With :math:`K_s = \mathrm{softmax}_N(K)` (per feature, over the tokens),
:math:`C = K_s^T V` (d x dv) and :math:`Q_s = \mathrm{softmax}_d(Q)` (per token):

* forward 1 (``K, V``): an online column softmax, as FlashAttention does over
  keys: running column max ``M``, sum ``L`` and ``exp(K - M)^T V``, rescaled when
  the max grows; per-program partials merged on the host into ``C``;
* forward 2 (``Q``): ``softmax_d(Q_i) C`` per token;
* backward 1 (``Q, dO``): :math:`dQ = Q_s \odot (dQ_s - \mathrm{rowsum}(dQ_s
  \odot Q_s))` with :math:`dQ_s = dO\,C^T`, and the partial :math:`dC = Q_s^T dO`;
* backward 2 (``K, V``): :math:`dV = K_s\,dC` and :math:`dK = K_s \odot (V dC^T -
  g)`, where the column sums of the softmax backward are
  :math:`g_c = \sum_j K_{s,jc} (V_j \cdot dC_c) = C_c \cdot dC_c`: O(d dv) numbers
  known from the small tensors, so no extra pass over the tokens.

Every input is read once per pass, every output and gradient written once; only
``M``, ``L`` and ``C`` (O(d dv)) are kept for backward. The softmaxes and all
accumulators are float32 (float64 for float64 inputs); the three products use
``tl.dot`` on operands in the input dtype (tensor cores for fp16/bf16; fp32 at
full ``ieee`` precision, not TF32). Tile sizes, warps and stages per dtype and
head dim: :func:`launch_config`. Custom ops ``mmhybrid::effatt_forward`` /
``_backward`` (:mod:`..triton_tiles`).
"""
from typing import Optional

import torch
import triton
import triton.language as tl

from ..triton_tiles import (INTERPRETED, TL_DTYPES, TokenTiling, acc_dtype,  # noqa: F401
                            head_pointer, load_tile, register_autograd, require_usable,
                            store_tile, triton_unusable_reason)


@triton.jit
def _query_softmax(q_ptr, rows, cols, N, D, s_n, s_d, ACC: tl.constexpr):
    """softmax over the d features of each row of a (BLOCK_N, BLOCK_D) tile."""
    q = load_tile(q_ptr, rows, cols, N, D, s_n, s_d, ACC)
    q = tl.where(cols[None, :] < D, q, float('-inf'))
    q = tl.exp(q - tl.max(q, axis=1)[:, None])
    return q / tl.sum(q, axis=1)[:, None]


@triton.jit
def _key_context_kernel(k_ptr, v_ptr, part_m_ptr, part_l_ptr, part_c_ptr, N, D, DV, H,
                        sk_b, sk_h, sk_n, sk_d, sv_b, sv_h, sv_n, sv_d,
                        rows_per_program, ACC: tl.constexpr, DOT: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                        BLOCK_DV: tl.constexpr):
    """Partial column max ``m``, ``sum exp(K - m)`` and ``exp(K - m)^T V``."""
    pid_bh, pid_n = tl.program_id(0), tl.program_id(1)
    k_ptr = head_pointer(k_ptr, pid_bh, H, sk_b, sk_h)
    v_ptr = head_pointer(v_ptr, pid_bh, H, sv_b, sv_h)
    cols, cols_v = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    col_max = tl.full([BLOCK_D], float('-inf'), ACC)
    col_sum = tl.zeros([BLOCK_D], ACC)
    context = tl.zeros([BLOCK_D, BLOCK_DV], ACC)
    for start in range(0, rows_per_program, BLOCK_N):
        rows = pid_n * rows_per_program + start + tl.arange(0, BLOCK_N)
        k = load_tile(k_ptr, rows, cols, N, D, sk_n, sk_d, ACC)
        k = tl.where(rows[:, None] < N, k, float('-inf'))
        v = load_tile(v_ptr, rows, cols_v, N, DV, sv_n, sv_d, DOT)
        new_max = tl.maximum(col_max, tl.max(k, axis=0))
        rescale = tl.exp(col_max - new_max)
        p = tl.exp(k - new_max[None, :])
        col_sum = col_sum * rescale + tl.sum(p, axis=0)
        context = context * rescale[:, None] + tl.dot(
            tl.trans(p.to(DOT)), v, input_precision='ieee').to(ACC)
        col_max = new_max
    part = pid_bh * tl.num_programs(1) + pid_n
    tl.store(part_m_ptr + part * D + cols, col_max, mask=cols < D)
    tl.store(part_l_ptr + part * D + cols, col_sum, mask=cols < D)
    store_tile(part_c_ptr + part * D * DV, context, cols, cols_v, D, DV, DV, 1)


@triton.jit
def _query_output_kernel(q_ptr, context_ptr, out_ptr, N, D, DV, H,
                         sq_b, sq_h, sq_n, sq_d, so_b, so_h, so_n, so_d,
                         rows_per_program, ACC: tl.constexpr, DOT: tl.constexpr,
                         BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                         BLOCK_DV: tl.constexpr):
    """``softmax_d(Q) C`` for this program's tokens."""
    pid_bh, pid_n = tl.program_id(0), tl.program_id(1)
    q_ptr = head_pointer(q_ptr, pid_bh, H, sq_b, sq_h)
    out_ptr = head_pointer(out_ptr, pid_bh, H, so_b, so_h)
    cols, cols_v = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    context = load_tile(context_ptr + pid_bh * D * DV, cols, cols_v, D, DV, DV, 1, DOT)
    for start in range(0, rows_per_program, BLOCK_N):
        rows = pid_n * rows_per_program + start + tl.arange(0, BLOCK_N)
        q = _query_softmax(q_ptr, rows, cols, N, D, sq_n, sq_d, ACC)
        out = tl.dot(q.to(DOT), context, input_precision='ieee')
        store_tile(out_ptr, out, rows, cols_v, N, DV, so_n, so_d)


@triton.jit
def _query_grad_kernel(q_ptr, do_ptr, context_ptr, dq_ptr, part_dc_ptr, N, D, DV, H,
                       sq_b, sq_h, sq_n, sq_d, so_b, so_h, so_n, so_d,
                       sdq_b, sdq_h, sdq_n, sdq_d, rows_per_program,
                       ACC: tl.constexpr, DOT: tl.constexpr, BLOCK_N: tl.constexpr,
                       BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    """``dQ`` of the feature softmax and the partial ``dC = softmax(Q)^T dO``."""
    pid_bh, pid_n = tl.program_id(0), tl.program_id(1)
    q_ptr = head_pointer(q_ptr, pid_bh, H, sq_b, sq_h)
    do_ptr = head_pointer(do_ptr, pid_bh, H, so_b, so_h)
    dq_ptr = head_pointer(dq_ptr, pid_bh, H, sdq_b, sdq_h)
    cols, cols_v = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    context = load_tile(context_ptr + pid_bh * D * DV, cols, cols_v, D, DV, DV, 1, DOT)
    grad_context = tl.zeros([BLOCK_D, BLOCK_DV], ACC)
    for start in range(0, rows_per_program, BLOCK_N):
        rows = pid_n * rows_per_program + start + tl.arange(0, BLOCK_N)
        q = _query_softmax(q_ptr, rows, cols, N, D, sq_n, sq_d, ACC)
        do = load_tile(do_ptr, rows, cols_v, N, DV, so_n, so_d, DOT)
        dq = tl.dot(do, tl.trans(context), input_precision='ieee').to(ACC)
        dq = q * (dq - tl.sum(dq * q, axis=1)[:, None])
        store_tile(dq_ptr, dq, rows, cols, N, D, sdq_n, sdq_d)
        grad_context += tl.dot(tl.trans(q.to(DOT)), do,
                               input_precision='ieee').to(ACC)
    part = pid_bh * tl.num_programs(1) + pid_n
    store_tile(part_dc_ptr + part * D * DV, grad_context, cols, cols_v, D, DV, DV, 1)


@triton.jit
def _key_value_grad_kernel(k_ptr, v_ptr, col_max_ptr, col_sum_ptr, dc_ptr, g_ptr,
                           dk_ptr, dv_ptr, N, D, DV, H,
                           sk_b, sk_h, sk_n, sk_d, sv_b, sv_h, sv_n, sv_d,
                           sdk_b, sdk_h, sdk_n, sdk_d, sdv_b, sdv_h, sdv_n, sdv_d,
                           rows_per_program, ACC: tl.constexpr, DOT: tl.constexpr,
                           BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                           BLOCK_DV: tl.constexpr):
    """``dV = K_s dC`` and ``dK = K_s * (V dC^T - g)`` for this program's tokens."""
    pid_bh, pid_n = tl.program_id(0), tl.program_id(1)
    k_ptr = head_pointer(k_ptr, pid_bh, H, sk_b, sk_h)
    v_ptr = head_pointer(v_ptr, pid_bh, H, sv_b, sv_h)
    dk_ptr = head_pointer(dk_ptr, pid_bh, H, sdk_b, sdk_h)
    dv_ptr = head_pointer(dv_ptr, pid_bh, H, sdv_b, sdv_h)
    cols, cols_v = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    col_ok = cols < D
    col_max = tl.load(col_max_ptr + pid_bh * D + cols, mask=col_ok, other=0.)
    col_sum = tl.load(col_sum_ptr + pid_bh * D + cols, mask=col_ok, other=1.)
    g = tl.load(g_ptr + pid_bh * D + cols, mask=col_ok, other=0.)
    grad_context = load_tile(dc_ptr + pid_bh * D * DV, cols, cols_v, D, DV, DV, 1, DOT)
    for start in range(0, rows_per_program, BLOCK_N):
        rows = pid_n * rows_per_program + start + tl.arange(0, BLOCK_N)
        k = load_tile(k_ptr, rows, cols, N, D, sk_n, sk_d, ACC)
        k = tl.where((rows[:, None] < N) & col_ok[None, :],
                     tl.exp(k - col_max[None, :]) / col_sum[None, :], 0.)
        v = load_tile(v_ptr, rows, cols_v, N, DV, sv_n, sv_d, DOT)
        dk = tl.dot(v, tl.trans(grad_context), input_precision='ieee').to(ACC)
        store_tile(dk_ptr, k * (dk - g[None, :]), rows, cols, N, D, sdk_n, sdk_d)
        dv = tl.dot(k.to(DOT), grad_context, input_precision='ieee')
        store_tile(dv_ptr, dv, rows, cols_v, N, DV, sdv_n, sdv_d)


def launch_config(q, v, block_n=None, rows_per_program=None):
    """The token tiling and the launch arguments (tile rows, warps, pipeline stages)
    shared by the four kernels, for the dtype and head dims of ``q`` and ``v``.

    fp16/bf16 products run on tensor cores: tiles of 4096 elements (128 x 32,
    64 x 64), 8 warps, 2 stages. fp32 (and fp64) products are exact FMA loops
    (``input_precision='ieee'``) that hold both operand tiles in registers: tiles of
    1024 elements (32 x 32, 16 x 64), 8 warps, no multi-stage buffering. Larger
    tiles spill registers on sm_80 or sm_90 (fp32 d = 64 at 128 x 64 and 3 stages
    also needs 188 KB of shared memory, more than an A100 has). Checked by
    ``tools/analysis/compile_check.py`` (tests/ops/test_kernel_compile.py).
    """
    half = q.dtype in (torch.float16, torch.bfloat16)
    cfg = TokenTiling(q, (q.shape[-1], v.shape[-1]), block_n, rows_per_program,
                      min_block=16, max_tile=4096 if half else 1024)
    # the products' operand dtype is the input's, except bfloat16 in the
    # interpreter, whose bf16 ``tl.dot`` returns garbage (Triton 3.8.0)
    dot = tl.float32 if q.dtype == torch.bfloat16 and INTERPRETED else TL_DTYPES[q.dtype]
    return cfg, dict(cfg.launch, DOT=dot, BLOCK_DV=cfg.blocks[1], num_warps=8,
                     num_stages=2 if half else 1)


@torch.library.custom_op('mmhybrid::effatt_forward', mutates_args=())
def effatt_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   block_n: Optional[int] = None, rows_per_program: Optional[int] = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Triton forward: output, column max and sum of K (B * heads, d) and the context
    ``C`` (B * heads, d, dv), the last three kept for backward."""
    B, H, N, D = q.shape
    DV = v.shape[-1]
    cfg, launch = launch_config(q, v, block_n, rows_per_program)
    part_m, part_l, part_c = cfg.partials(D), cfg.partials(D), cfg.partials(D, DV)
    _key_context_kernel[cfg.grid](
        k, v, part_m, part_l, part_c, N, D, DV, H, *k.stride(), *v.stride(), **launch)
    col_max = part_m.amax(1)
    rescale = torch.exp(part_m - col_max[:, None])
    col_sum = (part_l * rescale).sum(1)
    context = ((part_c * rescale[..., None]).sum(1) / col_sum[..., None]).contiguous()
    out = v.new_empty(B, H, N, DV)
    _query_output_kernel[cfg.grid](
        q, context, out, N, D, DV, H, *q.stride(), *out.stride(), **launch)
    return out, col_max, col_sum, context


@effatt_forward.register_fake
def _(q, k, v, block_n=None, rows_per_program=None):
    (B, H, N, D), DV, acc = q.shape, v.shape[-1], acc_dtype(q)
    return (v.new_empty(B, H, N, DV), q.new_empty(B * H, D, dtype=acc),
            q.new_empty(B * H, D, dtype=acc), q.new_empty(B * H, D, DV, dtype=acc))


@torch.library.custom_op('mmhybrid::effatt_backward', mutates_args=())
def effatt_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    grad_out: torch.Tensor, col_max: torch.Tensor, col_sum: torch.Tensor,
                    context: torch.Tensor, block_n: Optional[int] = None,
                    rows_per_program: Optional[int] = None
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Triton backward: (dq, dk, dv)."""
    B, H, N, D = q.shape
    DV = v.shape[-1]
    cfg, launch = launch_config(q, v, block_n, rows_per_program)
    grad_out = grad_out.to(v.dtype)
    grad_q, grad_k, grad_v = (torch.empty_like(t) for t in (q, k, v))
    part_dc = cfg.partials(D, DV)
    _query_grad_kernel[cfg.grid](
        q, grad_out, context, grad_q, part_dc, N, D, DV, H, *q.stride(),
        *grad_out.stride(), *grad_q.stride(), **launch)
    grad_context = part_dc.sum(1).contiguous()
    g = (context * grad_context).sum(-1).contiguous()
    _key_value_grad_kernel[cfg.grid](
        k, v, col_max, col_sum, grad_context, g, grad_k, grad_v, N, D, DV, H,
        *k.stride(), *v.stride(), *grad_k.stride(), *grad_v.stride(), **launch)
    return grad_q, grad_k, grad_v


@effatt_backward.register_fake
def _(q, k, v, grad_out, col_max, col_sum, context, block_n=None,
      rows_per_program=None):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


register_autograd(effatt_forward, effatt_backward, tensors=3, saved_outputs=1,
                  options=2)


def triton_effatt(q, k, v, block_n=None, rows_per_program=None):
    """``softmax_d(Q) (softmax_N(K)^T V)`` with the fused passes of this module on
    (B, heads, N, d) q, k and (B, heads, N, dv) v of one dtype, any strides;
    ``block_n``, ``rows_per_program`` force the tiling (tests)."""
    require_usable('effatt', q, k, v)
    return effatt_forward(q, k, v, block_n, rows_per_program)[0]
