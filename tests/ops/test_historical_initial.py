"""HAViT's fixed random H_0 (ops/historical_attention/initial.py): the hash against a
plain 32-bit reference, the distribution of the normals, independence of entries,
determinism and prefix consistency."""
import math
import random

import pytest
import torch

from mmhybrid.ops.historical_attention.initial import hash32, normal_history

M = (1 << 32) - 1


def lowbias32(x):
    """The hash on plain Python words with xor, shifts and wrapping products."""
    x ^= x >> 16
    x = (x * 0x7feb352d) & M
    x ^= x >> 15
    x = (x * 0x846ca68b) & M
    return x ^ (x >> 16)


def test_hash_is_lowbias32_and_injective():
    rng = random.Random(0)
    words = [0, 1, M, 1 << 31, 0x5bd1e995] + [rng.getrandbits(32) for _ in range(2000)]
    assert hash32(torch.tensor(words)).tolist() == [lowbias32(w) for w in words]
    out = hash32(torch.arange(1 << 20) * 4093)
    assert out.unique().numel() == 1 << 20 and 0 <= out.min() and out.max() <= M


@pytest.fixture(scope='module')
def h0():
    return normal_history(0, 4, 300, dtype=torch.float64)[0]


def _normal_cdf(x):
    return 0.5 * (1 + torch.erf(x / math.sqrt(2)))


def test_moments_and_shape_of_the_distribution(h0):
    z = h0.flatten()
    n = z.numel()  # 360,000: bounds at ~4.5 standard errors
    assert h0.shape == (4, 300, 300)
    assert abs(z.mean()) < 4.5 / n**0.5
    assert abs(z.var() - 1) < 4.5 * (2 / n)**0.5
    assert abs((z**3).mean()) < 4.5 * (15 / n)**0.5
    assert abs((z**4).mean() - 3) < 4.5 * (96 / n)**0.5
    # Kolmogorov-Smirnov distance to the standard normal (0.1% level: 1.95 / sqrt(n))
    s = z.sort().values
    ecdf = torch.arange(1, n + 1, dtype=s.dtype) / n
    assert (ecdf - _normal_cdf(s)).abs().max() < 1.95 / n**0.5
    tails = (z.abs() > 3).double().mean()  # 0.27% beyond 3 sigma
    assert abs(tails - 0.0027) < 4.5 * (0.0027 / n)**0.5


def _corr(a, b):
    a, b = a.flatten() - a.mean(), b.flatten() - b.mean()
    return (a @ b / (a.norm() * b.norm())).item(), a.numel()


def test_entries_are_uncorrelated(h0):
    other_seed = normal_history(1, 4, 300, dtype=torch.float64)[0]
    pairs = {
        'row neighbours': (h0[:, :, :-1], h0[:, :, 1:]),
        'column neighbours': (h0[:, :-1], h0[:, 1:]),
        'transpose': (h0, h0.transpose(1, 2)),
        'heads': (h0[:-1], h0[1:]),
        'seeds': (h0, other_seed),
        'squares of neighbours': (h0[:, :, :-1]**2, h0[:, :, 1:]**2),
        'value and next square': (h0[:, :-1], h0[:, 1:]**2),
    }
    for name, (a, b) in pairs.items():
        r, n = _corr(a, b)
        assert abs(r) < 4.5 / n**0.5, (name, r)
    # no per-row or per-column offsets: their means vary as 1 / sqrt(300)
    for dim in (1, 2):
        assert abs(h0.mean(dim).std() * 300**0.5 - 1) < 0.1


def test_deterministic_prefix_consistent_and_dtype_free():
    big = normal_history(7, 3, 64)
    assert torch.equal(normal_history(7, 3, 64), big)
    assert torch.equal(normal_history(7, 2, 21), big[:, :2, :21, :21])
    assert torch.equal(normal_history(7, 3, 64, dtype=torch.float64).float(), big)
    assert not torch.equal(normal_history(8, 3, 64), big)
    assert normal_history(7, 3, 64).dtype == torch.float32
