"""Bidirectional WKV (SoLA-Vision Eq. 9) as Triton kernels, forward and backward.

Same formulation as the chunk path's fast case, on (B, T, C) tensors in place (no
transposes), tiles of BLOCK_T tokens x BLOCK_C channels. With R the key maximum of a
(batch, channel) row and c = (T - 1) / 2, the left and right sums of Eq. 9 are

    L_t = e^{R - (t-1-c) w} sum_{i<t} e^{k_i - R + (i-c) w} x_i,
    R_t = e^{R + (t+1-c) w} sum_{i>t} e^{k_i - R - (i-c) w} x_i,   x = (v, 1),

prefix sums of source terms bounded by e^{T |w| / 2}. Kernels:

1. ``_tile_sums_kernel``: each tile's key maximum and its two source sums (``tl.sum``).
2. ``_carry_kernel``: per row, R and an exclusive prefix sum (left) and suffix sum
   (right) over the tiles (``tl.cumsum`` over blocks of BLOCK_N tiles).
3. ``_forward_kernel``: in-tile prefix sums of the sources shifted by one token (so the
   inclusive ``tl.cumsum`` is the exclusive sum, with no subtraction) plus the carries
   plus the token's own term e^{u + k_t}; writes y and the denominator relative to e^R.

Backward. K is symmetric, so dL/d(e^k v) and dL/d(e^k) are the same sums over sources
(g_t / den_t, g_t y_t / den_t): kernels 1-2 run on them and ``_backward_kernel``
recomputes the forward sums for dL/dw = -e^{-w} sum_t (R[g/den] L[e^k v] - R[g y/den]
L[e^k] + L[g/den] R[e^k v] - L[g y/den] R[e^k]) (the adjoint of the decay recurrence)
and sums dL/du per tile. Parameter gradients are reduced over tiles on the host.

Range. This is the single-scale regime of ``chunk.py`` (T max|w| <= MAX_DECAY_SPAN,
u in BONUS_RANGE; every sum then lies within e^{+-60} T in fp32 for |k| up to 60, in
fp32 whatever the input dtype). The forward kernel checks the range per channel on
the device and writes NaN where it does not hold (no host sync: safe under CUDA
graphs and ``torch.compile``); the chunk path (``backend='torch'``) is exact for any
w, u. The layer's w = decay / T keeps T |w| = |decay|.

Custom ops ``mmhybrid::bi_wkv_forward`` / ``_backward`` (:mod:`..triton_tiles`).

Traffic per token (fp32): forward reads k, v twice (tile sums, output) and writes y and
the denominator; backward reads g, y, den (tile sums) and k, v, g, y, den (output) and
writes dk, dv. Grids are (T / BLOCK_T, C / BLOCK_C, B), the carry scan
(C / BLOCK_C, B) looping over the tiles in blocks of BLOCK_N.
"""
import torch
import triton
import triton.language as tl

from ..triton_tiles import INTERPRETED, register_autograd
from .chunk import BONUS_RANGE, MAX_DECAY_SPAN

BLOCK_T = 64  # tokens per tile
BLOCK_N = 256  # tiles per step of the carry scan


@triton.jit
def _sources(k_ptr, v_ptr, g_ptr, y_ptr, den_ptr, offs, mask, key_max,
             BACKWARD: tl.constexpr):
    """Source terms (numerator, denominator) at ``offs``.

    Forward: e^{k - R} (v, 1), R = ``key_max``. Backward: (g, g y) / den, den relative
    to e^R.
    """
    if BACKWARD:
        g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        den = tl.load(den_ptr + offs, mask=mask, other=1.0)
        gd = g / den
        return gd, gd * y
    k = tl.load(k_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    v = tl.load(v_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    ek = tl.where(mask, tl.exp(k - key_max), 0.0)
    return ek * v, ek


@triton.jit
def _tile_sums_kernel(k_ptr, v_ptr, g_ptr, y_ptr, den_ptr, w_ptr, sums_ptr, T, C, NT,
                      centre, BACKWARD: tl.constexpr, BLOCK_T: tl.constexpr,
                      BLOCK_C: tl.constexpr):
    """Per tile: key maximum r and sum_i e^{k_i - r +- (i-c) w} (v_i, 1) -> sums
    (B, NT, 5, C) = (r, left num, left den, right num, right den)."""
    tile, cb, b = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    rows = tile * BLOCK_T + tl.arange(0, BLOCK_T)[:, None]
    cols = cb * BLOCK_C + tl.arange(0, BLOCK_C)[None, :]
    mask = (rows < T) & (cols < C)
    offs = b * T * C + rows * C + cols
    w = tl.load(w_ptr + cols, mask=cols < C, other=0.0)
    if BACKWARD:
        key_max = tl.zeros([1, BLOCK_C], tl.float32)
    else:
        k = tl.load(k_ptr + offs, mask=mask, other=-float('inf')).to(tl.float32)
        key_max = tl.max(k, axis=0, keep_dims=True)
        key_max = tl.where(cols < C, key_max, 0.0)
    num, den = _sources(k_ptr, v_ptr, g_ptr, y_ptr, den_ptr, offs, mask, key_max,
                        BACKWARD)
    pos = tl.exp(tl.where(mask, (rows.to(tl.float32) - centre) * w, 0.0))
    col = cb * BLOCK_C + tl.arange(0, BLOCK_C)
    out = sums_ptr + (b * NT + tile) * 5 * C + col
    cmask = col < C
    tl.store(out, tl.sum(key_max, axis=0), mask=cmask)
    tl.store(out + C, tl.sum(num * pos, axis=0), mask=cmask)
    tl.store(out + 2 * C, tl.sum(den * pos, axis=0), mask=cmask)
    tl.store(out + 3 * C, tl.sum(num / pos, axis=0), mask=cmask)
    tl.store(out + 4 * C, tl.sum(den / pos, axis=0), mask=cmask)


@triton.jit
def _carry_kernel(sums_ptr, carry_ptr, key_max_ptr, C, NT, BLOCK_N: tl.constexpr,
                  BLOCK_C: tl.constexpr):
    """Per row: R = max of the tile maxima; carry (B, NT, 4, C) = what enters each
    tile from the left (sum over earlier tiles) and from the right, relative to e^R."""
    cb, b = tl.program_id(0), tl.program_id(1).to(tl.int64)
    cols = cb * BLOCK_C + tl.arange(0, BLOCK_C)[None, :]
    cmask = cols < C
    base = sums_ptr + b * NT * 5 * C + cols
    key_max = tl.full([1, BLOCK_C], -float('inf'), tl.float32)
    for start in range(0, NT, BLOCK_N):
        j = start + tl.arange(0, BLOCK_N)[:, None]
        r = tl.load(base + j * 5 * C, mask=(j < NT) & cmask, other=-float('inf'))
        key_max = tl.maximum(key_max, tl.max(r, axis=0, keep_dims=True))
    key_max = tl.where(cmask, key_max, 0.0)
    col = cb * BLOCK_C + tl.arange(0, BLOCK_C)
    tl.store(key_max_ptr + b * C + col, tl.sum(key_max, axis=0), mask=col < C)
    out = carry_ptr + b * NT * 4 * C + cols
    for side in tl.static_range(2):
        total_num = tl.zeros([1, BLOCK_C], tl.float32)
        total_den = tl.zeros([1, BLOCK_C], tl.float32)
        for start in range(0, NT, BLOCK_N):
            walk = start + tl.arange(0, BLOCK_N)[:, None]
            # the tile passed just before this one: j - 1 (left) or j + 1 (right)
            if side == 0:
                j, src = walk, walk - 1
            else:
                j, src = NT - 1 - walk, NT - walk
            valid = (walk - 1 >= start) & (walk < NT) & cmask
            r = tl.load(base + src * 5 * C, mask=valid, other=0.0)
            scale = tl.where(valid, tl.exp(r - key_max), 0.0)
            num = tl.load(base + src * 5 * C + (1 + 2 * side) * C, mask=valid, other=0.0)
            den = tl.load(base + src * 5 * C + (2 + 2 * side) * C, mask=valid, other=0.0)
            num = total_num + tl.cumsum(num * scale, axis=0)
            den = total_den + tl.cumsum(den * scale, axis=0)
            store = (walk < NT) & cmask
            tl.store(out + j * 4 * C + 2 * side * C, num, mask=store)
            tl.store(out + j * 4 * C + (2 * side + 1) * C, den, mask=store)
            # add the last tile of this block, not yet in its last prefix
            last = start + BLOCK_N - 1
            lsrc = last if side == 0 else NT - 1 - last
            lvalid = (last < NT) & cmask
            r = tl.load(base + lsrc * 5 * C, mask=lvalid, other=0.0)
            scale = tl.where(lvalid, tl.exp(r - key_max), 0.0)
            is_last = walk == last
            total_num = (tl.sum(tl.where(is_last, num, 0.0), axis=0, keep_dims=True) +
                         scale * tl.load(base + lsrc * 5 * C + (1 + 2 * side) * C,
                                         mask=lvalid, other=0.0))
            total_den = (tl.sum(tl.where(is_last, den, 0.0), axis=0, keep_dims=True) +
                         scale * tl.load(base + lsrc * 5 * C + (2 + 2 * side) * C,
                                         mask=lvalid, other=0.0))


@triton.jit
def _exclusive_sums(k_ptr, v_ptr, g_ptr, y_ptr, den_ptr, carry_ptr, key_max, w, b, tile,
                    rows, cols, T, C, NT, centre, BACKWARD: tl.constexpr,
                    BLOCK_T: tl.constexpr):
    """Left and right sums at every token of a tile, relative to e^{R +- (t-c) w}:
    sum_{i<t} e^{k_i - R + (i-c) w} x_i and sum_{i>t} e^{k_i - R - (i-c) w} x_i."""
    first = tile * BLOCK_T
    cmask = cols < C
    carry = carry_ptr + (b * NT + tile) * 4 * C + cols
    # left: the token before (inside the tile; earlier tiles come with the carry)
    src = rows - 1
    mask = (src >= first) & (src < T) & cmask
    num, den = _sources(k_ptr, v_ptr, g_ptr, y_ptr, den_ptr, b * T * C + src * C + cols,
                        mask, key_max, BACKWARD)
    pos = tl.exp(tl.where(mask, (src.to(tl.float32) - centre) * w, 0.0))
    lnum = tl.load(carry, mask=cmask, other=0.0) + tl.cumsum(num * pos, axis=0)
    lden = tl.load(carry + C, mask=cmask, other=0.0) + tl.cumsum(den * pos, axis=0)
    # right: the token after, reverse prefix sum
    src = rows + 1
    mask = (src < first + BLOCK_T) & (src < T) & cmask
    num, den = _sources(k_ptr, v_ptr, g_ptr, y_ptr, den_ptr, b * T * C + src * C + cols,
                        mask, key_max, BACKWARD)
    pos = tl.exp(tl.where(mask, (src.to(tl.float32) - centre) * w, 0.0))
    rnum = (tl.load(carry + 2 * C, mask=cmask, other=0.0) +
            tl.cumsum(num / pos, axis=0, reverse=True))
    rden = (tl.load(carry + 3 * C, mask=cmask, other=0.0) +
            tl.cumsum(den / pos, axis=0, reverse=True))
    return lnum, lden, rnum, rden


@triton.jit
def _forward_kernel(k_ptr, v_ptr, w_ptr, u_ptr, carry_ptr, key_max_ptr, out_ptr, den_ptr,
                    T, C, NT, centre, SPAN: tl.constexpr, BONUS_MIN: tl.constexpr,
                    BONUS_MAX: tl.constexpr, BLOCK_T: tl.constexpr,
                    BLOCK_C: tl.constexpr):
    tile, cb, b = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    rows = tile * BLOCK_T + tl.arange(0, BLOCK_T)[:, None]
    cols = cb * BLOCK_C + tl.arange(0, BLOCK_C)[None, :]
    cmask = cols < C
    mask = (rows < T) & cmask
    offs = b * T * C + rows * C + cols
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0)
    u = tl.load(u_ptr + cols, mask=cmask, other=0.0)
    key_max = tl.load(key_max_ptr + b * C + cols, mask=cmask, other=0.0)
    lnum, lden, rnum, rden = _exclusive_sums(k_ptr, v_ptr, k_ptr, k_ptr, k_ptr, carry_ptr,
                                             key_max, w, b, tile, rows, cols, T, C, NT,
                                             centre, False, BLOCK_T)
    own_num, own_den = _sources(k_ptr, v_ptr, k_ptr, k_ptr, k_ptr, offs, mask, key_max,
                                False)
    pos, ew = tl.exp(tl.where(mask, (rows.to(tl.float32) - centre) * w, 0.0)), tl.exp(w)
    to_left, to_right = ew / pos, ew * pos  # e^{-(t-1-c) w}, e^{(t+1-c) w}
    bonus = tl.exp(u)
    num = to_left * lnum + to_right * rnum + bonus * own_num
    den = to_left * lden + to_right * rden + bonus * own_den
    # channels outside the single-scale range: NaN, not a silently wrong number
    ok = (T * tl.abs(w) <= SPAN) & (u >= BONUS_MIN) & (u <= BONUS_MAX)
    y = tl.where(ok, num / den, float('nan'))
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(den_ptr + offs, den, mask=mask)


@triton.jit
def _backward_kernel(k_ptr, v_ptr, g_ptr, y_ptr, den_ptr, w_ptr, u_ptr, carry_ptr,
                     key_max_ptr, grad_carry_ptr, dk_ptr, dv_ptr, dw_ptr, du_ptr, T, C,
                     NT, centre, BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr):
    tile, cb, b = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    rows = tile * BLOCK_T + tl.arange(0, BLOCK_T)[:, None]
    cols = cb * BLOCK_C + tl.arange(0, BLOCK_C)[None, :]
    cmask = cols < C
    mask = (rows < T) & cmask
    offs = b * T * C + rows * C + cols
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0)
    u = tl.load(u_ptr + cols, mask=cmask, other=0.0)
    key_max = tl.load(key_max_ptr + b * C + cols, mask=cmask, other=0.0)
    # forward sums of (e^k v, e^k) and backward sums of (g, g y) / den at every token
    f_ln, f_ld, f_rn, f_rd = _exclusive_sums(k_ptr, v_ptr, k_ptr, k_ptr, k_ptr, carry_ptr,
                                             key_max, w, b, tile, rows, cols, T, C, NT,
                                             centre, False, BLOCK_T)
    b_ln, b_ld, b_rn, b_rd = _exclusive_sums(k_ptr, v_ptr, g_ptr, y_ptr, den_ptr,
                                             grad_carry_ptr, key_max, w, b, tile, rows,
                                             cols, T, C, NT, centre, True, BLOCK_T)
    ekv, ek = _sources(k_ptr, v_ptr, k_ptr, k_ptr, k_ptr, offs, mask, key_max, False)
    gd, gyd = _sources(k_ptr, v_ptr, g_ptr, y_ptr, den_ptr, offs, mask, key_max, True)
    v = tl.load(v_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    pos, ew = tl.exp(tl.where(mask, (rows.to(tl.float32) - centre) * w, 0.0)), tl.exp(w)
    to_left, to_right = ew / pos, ew * pos  # e^{-(t-1-c) w}, e^{(t+1-c) w}
    bonus = tl.exp(u)
    # P_t = sum_i K(t, i) (g_i, g_i y_i) / den_i; dv = e^{k-R} P0, dk = e^{k-R}(v P0 - P1)
    p0 = to_left * b_ln + to_right * b_rn + bonus * gd
    p1 = to_left * b_ld + to_right * b_rd + bonus * gyd
    tl.store(dv_ptr + offs, (ek * p0).to(dv_ptr.dtype.element_ty), mask=mask)
    tl.store(dk_ptr + offs, (ek * (v * p0 - p1)).to(dk_ptr.dtype.element_ty), mask=mask)
    # the e^{+-R} and e^{+-(t-c) w} factors of the paired sums cancel to e^{2w}
    dw = -tl.exp(w) * (f_ln * b_rn - f_ld * b_rd + b_ln * f_rn - b_ld * f_rd)
    du = bonus * (ekv * gd - ek * gyd)
    col = cb * BLOCK_C + tl.arange(0, BLOCK_C)
    part = (b * NT + tile) * C + col
    tl.store(dw_ptr + part, tl.sum(tl.where(mask, dw, 0.0), axis=0), mask=col < C)
    tl.store(du_ptr + part, tl.sum(tl.where(mask, du, 0.0), axis=0), mask=col < C)


def _tiles(k):
    """NT, BLOCK_C and the grid (NT, C / BLOCK_C, B) of the tile kernels on (B, T, C)."""
    B, T, C = k.shape
    NT, bc = triton.cdiv(T, BLOCK_T), min(16, triton.next_power_of_2(C))
    return NT, bc, (NT, triton.cdiv(C, bc), B)


def _carries(w, sources, backward):
    """Tile sums then carries; ``sources`` = (k, v, g, y, den). Returns (carry, R)."""
    k = sources[0]
    (B, T, C), (NT, bc, grid) = k.shape, _tiles(k)
    sums = k.new_empty(B, NT, 5, C, dtype=torch.float32)
    _tile_sums_kernel[grid](*sources, w, sums, T, C, NT, (T - 1) / 2, BACKWARD=backward,
                            BLOCK_T=BLOCK_T, BLOCK_C=bc)
    carry = k.new_empty(B, NT, 4, C, dtype=torch.float32)
    key_max = k.new_empty(B, C, dtype=torch.float32)
    block_n = min(BLOCK_N, triton.next_power_of_2(NT))
    _carry_kernel[grid[1:]](sums, carry, key_max, C, NT, BLOCK_N=block_n, BLOCK_C=bc)
    return carry, key_max


@torch.library.custom_op('mmhybrid::bi_wkv_forward', mutates_args=())
def bi_wkv_forward(w: torch.Tensor, u: torch.Tensor, k: torch.Tensor,
                   v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                             torch.Tensor]:
    """Triton forward: (y, den, carry, key maximum); channels outside the
    single-scale range get NaN (the module docstring's Range)."""
    B, T, C = k.shape
    k, v = k.contiguous(), v.contiguous()
    wf, uf = w.detach().float().contiguous(), u.detach().float().contiguous()
    carry, key_max = _carries(wf, (k, v, k, k, k), False)
    out, den = torch.empty_like(v), torch.empty_like(k, dtype=torch.float32)
    NT, bc, grid = _tiles(k)
    _forward_kernel[grid](
        k, v, wf, uf, carry, key_max, out, den, T, C, NT, (T - 1) / 2,
        SPAN=MAX_DECAY_SPAN, BONUS_MIN=BONUS_RANGE[0], BONUS_MAX=BONUS_RANGE[1],
        BLOCK_T=BLOCK_T, BLOCK_C=bc)
    return out, den, carry, key_max


@bi_wkv_forward.register_fake
def _(w, u, k, v):
    B, T, C = k.shape
    den, carry, key_max = (k.new_empty(shape, dtype=torch.float32) for shape in
                           ((B, T, C), (B, -(-T // BLOCK_T), 4, C), (B, C)))
    return torch.empty_like(v, memory_format=torch.contiguous_format), den, carry, key_max


@torch.library.custom_op('mmhybrid::bi_wkv_backward', mutates_args=())
def bi_wkv_backward(w: torch.Tensor, u: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    grad_out: torch.Tensor, out: torch.Tensor, den: torch.Tensor,
                    carry: torch.Tensor, key_max: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Triton backward: (dw, du, dk, dv)."""
    B, T, C = k.shape
    k, v = k.contiguous(), v.contiguous()
    wf, uf = w.detach().float().contiguous(), u.detach().float().contiguous()
    g = grad_out.contiguous()
    grad_carry, _ = _carries(wf, (k, v, g, out, den), True)
    NT, bc, grid = _tiles(k)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    dw = k.new_empty(B, NT, C, dtype=torch.float32)
    du = torch.empty_like(dw)
    _backward_kernel[grid](k, v, g, out, den, wf, uf, carry, key_max, grad_carry, dk,
                           dv, dw, du, T, C, NT, (T - 1) / 2, BLOCK_T=BLOCK_T,
                           BLOCK_C=bc)
    return dw.sum((0, 1)).to(w.dtype), du.sum((0, 1)).to(u.dtype), dk, dv


@bi_wkv_backward.register_fake
def _(w, u, k, v, grad_out, out, den, carry, key_max):
    contiguous = torch.contiguous_format
    return (torch.empty_like(w), torch.empty_like(u),
            torch.empty_like(k, memory_format=contiguous),
            torch.empty_like(v, memory_format=contiguous))


register_autograd(bi_wkv_forward, bi_wkv_backward, tensors=4, saved_outputs=0)


def fused_bi_wkv(w, u, k, v):
    """Bidirectional WKV of Eq. 9 with the Triton kernels (CUDA tensors, or CPU tensors
    under ``TRITON_INTERPRET=1``); channels outside the single-scale range come out
    as NaN (the module docstring's Range)."""
    if k.device.type != 'cuda' and not INTERPRETED:
        raise RuntimeError('the triton WKV backend needs CUDA tensors (CPU tensors run '
                           'only with TRITON_INTERPRET=1 set before triton is '
                           'imported); use backend="torch"')
    return bi_wkv_forward(w, u, k, v)[0]
