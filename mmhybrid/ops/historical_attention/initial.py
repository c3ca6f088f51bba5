"""HAViT's random starting history ``H_0`` as a pure function of (seed, head, i, j).

Entry (h, i, j) is a standard normal made by Box-Muller from two 32-bit hashes of its
own counter, so ``H_0`` is the same in eager PyTorch and in every traced graph (ONNX,
torch.export, torch.compile) for any N, and the ``N x N`` history is the top-left
block of any larger one. The hash is lowbias32 (C. Wellons' hash prospector: two
xor-shift-multiply rounds, a bijection of 32-bit words) on int64 tensors, written
with ``+ * // &`` only, every intermediate below 2^63 (the second multiplier taken
mod 2^32 as a negative number): no overflow, and ONNX opset 18 has all of them.
"""
import math

import torch

from ..tracing import is_tracing

M32 = 1 << 32
# the last fixed H_0 per (seed, heads) that an eager call asked for
_FIXED = {}


def _xor(a, b):
    return a + b - 2 * (a & b)  # exact for non-negative words; ONNX has no int Xor here


def hash32(x):
    """lowbias32 of int64 tensors holding words in [0, 2^32)."""
    x = _xor(x, x // 65536)
    x = (x * 0x7feb352d) & (M32 - 1)
    x = _xor(x, x // 32768)
    x = (x * (0x846ca68b - M32)) & (M32 - 1)
    return _xor(x, x // 65536)


def normal_history(seed, heads, n, device=None, dtype=torch.float32):
    r"""(1, heads, n, n) standard normals by Box-Muller, pairs of columns (2m, 2m + 1)
    getting :math:`r \cos\theta, r \sin\theta`, :math:`r = \sqrt{-2 \ln u_1}`,
    :math:`\theta = 2 \pi u_2`.

    Counters: a key per head ``hash(hash(seed) ^ h)``, per row ``r_i = hash(key ^ i)``,
    per column pair ``c_m = hash(m ^ C)``; ``x = hash(r_i ^ c_m)`` gives
    ``u_1 = (x + 1/2) / 2^32`` and ``hash(x)`` gives ``u_2``. Computed in float64.
    """
    index = torch.arange(n, device=device)
    key = hash32(_xor(torch.arange(heads, device=device), hash32(seed % M32)))
    rows = hash32(_xor(key[:, None], index))
    cols = hash32(_xor(index // 2, 0x5bd1e995))  # column j: pair j // 2
    x = hash32(_xor(rows[:, :, None], cols))
    radius = torch.sqrt(-2 * torch.log((x.double() + 0.5) / M32))
    angle = hash32(x).double() * (2 * math.pi / M32)
    # cos for even columns, sin for odd ones; no slice of 2 ceil(n / 2) columns
    # to n (torch.export would guard the parity of n)
    z = torch.where(index % 2 == 0, torch.cos(angle), torch.sin(angle)) * radius
    return z.to(dtype)[None]


def fixed_history(seed, heads, n, device=None, dtype=torch.float32):
    """:func:`normal_history`, kept for eager calls (the last ``n``, device and
    dtype per seed and heads: a model reuses one image size) and computed in
    traced graphs (one graph then serves every ``n``)."""
    if is_tracing():
        return normal_history(seed, heads, n, device, dtype)
    key, shape = (seed, heads), (n, device, dtype)
    if key not in _FIXED or _FIXED[key][0] != shape:
        _FIXED[key] = (shape, normal_history(seed, heads, n, device, dtype))
    return _FIXED[key][1]
