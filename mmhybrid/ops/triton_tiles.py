"""How mmhybrid's Triton kernels tile (B, heads, N, d) tensors along the tokens.

Each program owns one (batch, head) and ``rows_per_program`` consecutive tokens,
streamed in ``BLOCK_N``-row tiles whose columns are padded to powers of two. The
split of N is chosen so that about 8 programs per SM run whatever B * heads is;
each program writes one partial reduction that the host combines (O(d) or
O(d^2) numbers per program). Imported only by the fused modules (it needs Triton).

Each fused forward and backward is a ``torch.library`` custom op with a fake
kernel and a registered autograd formula, so ``torch.compile`` and
``torch.export`` see through them. ``TRITON_INTERPRET=1`` set before Triton is
imported runs the kernels on CPU tensors (tests; see tests/_triton.py).
"""
import functools

import torch
import triton
import triton.language as tl

from .heads import acc_dtype

# @triton.jit reads TRITON_INTERPRET when it decorates: when a fused module is imported
INTERPRETED = triton.knobs.runtime.interpret
TL_DTYPES = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16,
             torch.float32: tl.float32, torch.float64: tl.float64}
MAX_TILE = 8192  # elements of one (BLOCK_N, BLOCK_D) tile


@functools.lru_cache(maxsize=None)
def _num_sms(device):
    return torch.cuda.get_device_properties(device).multi_processor_count


class TokenTiling:
    """Tile sizes and the split of the tokens of ``x`` (B, heads, N, ...) over programs.

    Args:
        x (Tensor): the tensor whose tokens are split (its device and dtype too).
        widths (sequence[int]): column counts (d, dv, ...) -> ``blocks``, powers of
            two of at least ``min_block`` (16 where ``tl.dot`` uses them).
        block_n, rows_per_program (int, optional): force the tile rows and the
            rows per program (tests); by default the tile holds at most
            ``max_tile`` elements and the GPU gets ~8 programs per SM.

    ``launch`` holds the keywords every token-tiled kernel takes: ``rows_per_program``,
    ``ACC`` (the accumulation dtype), ``BLOCK_N`` and ``BLOCK_D`` (``blocks[0]``).
    """

    def __init__(self, x, widths, block_n=None, rows_per_program=None, min_block=1,
                 max_tile=MAX_TILE):
        B, H, N = x.shape[:3]
        self.BH = B * H
        self.blocks = [max(min_block, triton.next_power_of_2(w)) for w in widths]
        self.block_n = block_n or max(16, min(128, max_tile // max(self.blocks)))
        tiles = triton.cdiv(N, self.block_n)
        if rows_per_program is None:
            target = 8 * _num_sms(x.device) if x.is_cuda else 1
            programs = min(tiles, max(1, triton.cdiv(target, self.BH)))
            rows_per_program = triton.cdiv(tiles, programs) * self.block_n
        elif rows_per_program % self.block_n:
            raise ValueError(f'rows_per_program ({rows_per_program}) must be a '
                             f'multiple of block_n ({self.block_n})')
        # (batch * heads, token slices): the first grid axis has no 65535 limit
        self.programs = triton.cdiv(N, rows_per_program)
        self.grid = (self.BH, self.programs)
        self.acc = acc_dtype(x)
        self.device = x.device
        self.launch = dict(rows_per_program=rows_per_program, ACC=TL_DTYPES[self.acc],
                           BLOCK_N=self.block_n, BLOCK_D=self.blocks[0])

    def partials(self, *shape):
        """An uninitialised (B * heads, programs, *shape) buffer for partial sums."""
        return torch.empty(self.BH, self.programs, *shape, dtype=self.acc,
                           device=self.device)


def triton_unusable_reason(*tensors):
    """Why the kernels cannot take these (B, heads, N, d) tensors (a sentence), or
    None; ``None`` entries (a tied ``k``) are skipped."""
    tensors = [t for t in tensors if t is not None]
    if not INTERPRETED and not all(t.is_cuda for t in tensors):
        return (f'the tensors are on {tensors[0].device.type}; the Triton kernels need '
                f'CUDA tensors (or TRITON_INTERPRET=1 set before importing triton)')
    if len({t.dtype for t in tensors}) > 1:
        return 'q, k and v have different dtypes'
    if any(t.dim() != 4 for t in tensors):
        return f'q, k, v must be (B, heads, N, d); got {tensors[0].dim()} dims'
    return None


def require_usable(op, *tensors):
    """Raise a RuntimeError naming ``op`` unless the kernels take ``tensors``."""
    reason = triton_unusable_reason(*tensors)
    if reason is not None:
        raise RuntimeError(f'{op} triton backend: {reason}')


def register_autograd(forward, backward, tensors, saved_outputs, options=0):
    """Differentiate the custom op ``forward`` by the custom op ``backward``, called
    as ``backward(*tensors, grad of output 0, *outputs[saved_outputs:], *options)``
    with ``forward``'s first ``tensors`` and last ``options`` arguments. It returns
    the gradients of those tensors; a None argument (a tied ``k``) gets None."""
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:tensors], *output[saved_outputs:])
        ctx.options, ctx.others = inputs[len(inputs) - options:], len(inputs) - tensors

    def formula(ctx, grad, *unused):
        saved = ctx.saved_tensors
        grads = backward(*saved[:tensors], grad, *saved[tensors:], *ctx.options)
        return (*(None if x is None else g for x, g in zip(saved, grads)),
                *[None] * ctx.others)

    forward.register_autograd(formula, setup_context=setup_context)


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
