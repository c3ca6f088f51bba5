"""Triton helpers of the token-tiled kernels (:mod:`.token_tiling`'s scheme):
a program's (batch, head) slice of a strided (B, heads, N, d) tensor and masked
tiles of it. Imported only by the fused modules (it needs Triton).
"""
import os

import triton
import triton.language as tl

# TRITON_INTERPRET=1 set before Triton is imported runs kernels on CPU tensors
INTERPRETED = os.environ.get('TRITON_INTERPRET', '0') == '1'


@triton.jit
def head_pointer(ptr, pid_bh, H, s_b, s_h):
    """``ptr`` moved to the (batch, head) ``divmod(pid_bh, H)`` of a strided tensor."""
    return ptr + (pid_bh // H).to(tl.int64) * s_b + (pid_bh % H).to(tl.int64) * s_h


@triton.jit
def load_tile(ptr, rows, cols, N, D, s_n, s_d, DTYPE: tl.constexpr):
    """The (rows, cols) tile of an (N, D) matrix with strides (s_n, s_d), zero
    outside it, as ``DTYPE``."""
    mask = (rows[:, None] < N) & (cols[None, :] < D)
    offsets = rows[:, None].to(tl.int64) * s_n + cols[None, :] * s_d
    return tl.load(ptr + offsets, mask=mask, other=0.).to(DTYPE)


@triton.jit
def store_tile(ptr, value, rows, cols, N, D, s_n, s_d):
    """Store the (rows, cols) tile of an (N, D) matrix, cast to its dtype."""
    mask = (rows[:, None] < N) & (cols[None, :] < D)
    offsets = rows[:, None].to(tl.int64) * s_n + cols[None, :] * s_d
    tl.store(ptr + offsets, value.to(ptr.dtype.element_ty), mask=mask)
