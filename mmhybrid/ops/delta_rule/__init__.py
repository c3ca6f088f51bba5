r"""The gated delta rule of Gated DeltaNet (Yang et al. 2025; InfiniteVL Eq. 2).

``gated_delta_rule`` dispatches to a backend: ``naive`` (per-token recurrence, the
reference), ``torch`` (alias ``chunk``: the chunked WY/UT form in plain PyTorch,
the default on CPU) and ``fla`` (flash-linear-attention's Triton
``chunk_gated_delta_rule``, the default on CUDA when ``fla`` imports), by the rule
of :mod:`mmhybrid.ops.dispatch`.
"""
import functools

import torch

from ..dispatch import choose_backend
from .chunk import chunk_gated_delta_rule
from .naive import l2norm, naive_gated_delta_rule


@functools.lru_cache(maxsize=None)
def fla_gated_delta_rule():
    """fla's ``chunk_gated_delta_rule``, or None when fla does not import."""
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fn
    except ImportError:
        return None
    return fn


def _fla(q, k, v, g, beta, **kwargs):
    fn = fla_gated_delta_rule()
    if fn is None:
        raise ImportError('the fla backend needs flash-linear-attention '
                          '(pip install mmhybrid[gpu])')
    if q.device.type != 'cuda':
        raise ValueError(f'the fla backend runs on CUDA tensors, got '
                         f'{q.device.type}; use backend="torch"')
    return fn(q, k, v, g, beta, **kwargs)


def _on_both_directions(fn):
    """``fn`` with ``bidirectional``, for backends without it: one call on the 2B
    sequences and their reverses, the reversed read-outs flipped back and added."""
    @functools.wraps(fn)
    def wrapper(q, k, v, g, beta, bidirectional=False, **kwargs):
        if not bidirectional:
            return fn(q, k, v, g, beta, **kwargs)
        o, state = fn(*(torch.cat((x, x.flip(1))) for x in (q, k, v, g, beta)), **kwargs)
        return o[:len(q)] + o[len(q):].flip(1), state
    return wrapper


_BACKENDS = {'naive': _on_both_directions(naive_gated_delta_rule),
             'chunk': chunk_gated_delta_rule, 'torch': chunk_gated_delta_rule,
             'fla': _on_both_directions(_fla)}


def default_backend(device_type, backend=None):
    """The backend :func:`gated_delta_rule` runs (:mod:`mmhybrid.ops.dispatch`);
    automatic: fla on CUDA when it imports, else chunk."""
    return choose_backend(
        'gated_delta_rule', _BACKENDS, lambda: 'fla' if device_type == 'cuda' and
        fla_gated_delta_rule() is not None else 'chunk', backend)


def gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None,
                     output_final_state=False, use_qk_l2norm_in_kernel=False,
                     bidirectional=False, backend=None):
    r"""Gated delta rule, multi-head, in fla's layout and argument names.

    The paper (InfiniteVL Eq. 2) writes the state as ``S_t`` (V x K),
    ``S_t = S_{t-1} alpha_t (I - beta_t k_t k_t^T) + beta_t v_t k_t^T``, read by
    ``S_t q_t``. We keep its transpose ``M_t = S_t^T`` (K x V, fla's layout):

    .. math::
        M_t = \alpha_t (I - \beta_t k_t k_t^T) M_{t-1} + \beta_t k_t v_t^T, \qquad
        o_t = s\, M_t^T q_t, \qquad \alpha_t = e^{g_t}.

    Args:
        q, k (Tensor): (B, T, H, K) queries and keys.
        v (Tensor): (B, T, H, V) values.
        g (Tensor): (B, T, H) log-decay ``g_t <= 0`` (``alpha_t = exp(g_t)``).
        beta (Tensor): (B, T, H) write strength, usually in (0, 1).
        scale (float, optional): ``s``, default ``K ** -0.5``.
        initial_state (Tensor, optional): (B, H, K, V) ``M_0``, default zeros.
        output_final_state (bool): also return ``M_T``.
        use_qk_l2norm_in_kernel (bool): L2-normalise q and k per head first
            (Gated DeltaNet does; fla's name for it).
        bidirectional (bool): also run the rule over the reversed sequences
            and add their read-outs, flipped back, to ``o``; the states are
            those of the 2B sequences (forward ones first).
        backend (str, optional): ``'chunk'``/``'torch'``, ``'naive'`` or
            ``'fla'``; default :func:`default_backend`.
    Returns:
        tuple: o (B, T, H, V) in the dtype of ``v``, and the final state
        (B or 2B, H, K, V) in float32 or wider, or None.
    """
    if q.dim() != 4 or q.shape != k.shape or v.shape[:3] != q.shape[:3]:
        raise ValueError(f'q, k must be (B, T, H, K) and v (B, T, H, V); got '
                         f'{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}')
    if g.shape != q.shape[:3] or beta.shape != q.shape[:3]:
        raise ValueError(f'g and beta must be {tuple(q.shape[:3])}; got '
                         f'{tuple(g.shape)} and {tuple(beta.shape)}')
    return _BACKENDS[default_backend(q.device.type, backend)](
        q, k, v, g, beta, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, bidirectional=bidirectional)


def delta_rule_macs(batch, tokens, heads, key_dim, value_dim):
    r"""Gated delta rule (InfiniteVL Eq. 2) as its per-token recurrence.

    Per token and head, with the K x V state ``M``: the decay ``alpha_t M`` (K V),
    the read-out ``M^T k_t`` of the delta (K V), ``beta_t k_t`` (K) and the
    rank-1 write ``(beta_t k_t) delta_t^T`` (K V), the output ``M_t^T q_t`` (K V):
    ``4 K V + K`` multiply-adds, the multiplications of the naive recurrence
    (:func:`mmhybrid.ops.delta_rule.naive_gated_delta_rule`). Not counted, as
    fvcore counts no element-wise op: the L2 norms of q and k, exponentials, the
    output scale. The chunked (WY/UT) form the CPU runs does about twice this
    at chunk 32 and depends on the chunk size; fla's kernels are invisible to a
    counter: neither is the method's cost.
    """
    return batch * tokens * heads * (4 * key_dim * value_dim + key_dim)


__all__ = ['gated_delta_rule', 'chunk_gated_delta_rule', 'naive_gated_delta_rule',
           'fla_gated_delta_rule', 'default_backend', 'l2norm', 'delta_rule_macs']
