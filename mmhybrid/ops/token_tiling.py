"""How mmhybrid's Triton kernels tile (B, heads, N, d) tensors along the tokens.

Each program owns one (batch, head) and ``rows_per_program`` consecutive tokens,
streamed in ``BLOCK_N``-row tiles whose columns are padded to powers of two. The
split of N is chosen so that about 8 programs per SM run whatever B * heads is;
each program writes one partial reduction that the host combines (O(d) or
O(d^2) numbers per program). Plain Python: importable without Triton.
"""
import functools

import torch

MAX_TILE = 8192  # elements of one (BLOCK_N, BLOCK_D) tile


def next_power_of_2(n):
    return 1 << max(0, int(n) - 1).bit_length()


def cdiv(a, b):
    return -(-a // b)


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
            ``MAX_TILE`` elements and the GPU gets ~8 programs per SM.
    """

    def __init__(self, x, widths, block_n=None, rows_per_program=None, min_block=1):
        B, H, N = x.shape[:3]
        self.BH = B * H
        self.blocks = [max(min_block, next_power_of_2(w)) for w in widths]
        self.block_n = block_n or max(16, min(128, MAX_TILE // max(self.blocks)))
        tiles = cdiv(N, self.block_n)
        if rows_per_program is None:
            target = 8 * _num_sms(x.device) if x.is_cuda else 1
            programs = min(tiles, max(1, cdiv(target, self.BH)))
            rows_per_program = cdiv(tiles, programs) * self.block_n
        elif rows_per_program % self.block_n:
            raise ValueError(f'rows_per_program ({rows_per_program}) must be a '
                             f'multiple of block_n ({self.block_n})')
        self.rows_per_program = rows_per_program
        # (batch * heads, token slices): the first grid axis has no 65535 limit
        self.programs = cdiv(N, rows_per_program)
        self.grid = (self.BH, self.programs)
        self.acc = torch.float64 if x.dtype == torch.float64 else torch.float32
        self.device = x.device

    def partials(self, *shape):
        """An uninitialised (B * heads, programs, *shape) buffer for partial sums."""
        return torch.empty(self.BH, self.programs, *shape, dtype=self.acc,
                           device=self.device)
