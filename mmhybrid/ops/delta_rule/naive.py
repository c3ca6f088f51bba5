"""Reference gated delta rule: the per-token recurrence of Gated DeltaNet.

A Python loop over the T tokens, O(T K V) per head; meant for tests (works in
float64).
"""
import torch

from ..heads import acc_dtype


L2NORM_EPS = 1e-6


def l2norm(x, eps=L2NORM_EPS):
    """``x / sqrt(sum(x^2) + eps)`` over the last dim (fla's form: smooth at 0)."""
    return x * torch.rsqrt(x.square().sum(-1, keepdim=True) + eps)


def naive_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None,
                           output_final_state=False,
                           use_qk_l2norm_in_kernel=False):
    r"""One token at a time:

    .. math::
        M_t = e^{g_t} (I - \beta_t k_t k_t^T) M_{t-1} + \beta_t k_t v_t^T, \qquad
        o_t = s\, M_t^T q_t

    with ``M_t`` (K x V) the transpose of the paper's ``S_t``; see
    :func:`mmhybrid.ops.gated_delta_rule` for the arguments.
    """
    B, T, H, K = k.shape
    V = v.shape[-1]
    scale = K**-0.5 if scale is None else scale
    dtype = acc_dtype(v)
    # (B, H, T, d) and (B, H, T)
    q, k, v, g, beta = (x.to(dtype).transpose(1, 2) for x in (q, k, v, g, beta))
    if use_qk_l2norm_in_kernel:
        q, k = l2norm(q), l2norm(k)
    state = (q.new_zeros(B, H, K, V) if initial_state is None else
             initial_state.to(dtype))
    out = []
    for t in range(T):
        k_t = k[:, :, t]
        state = state * g[:, :, t].exp()[..., None, None]
        # delta: what v_t adds beyond what the decayed state already returns for k_t
        delta = v[:, :, t] - (k_t[..., None] * state).sum(-2)
        state = state + beta[:, :, t, None, None] * k_t[..., None] * delta[..., None, :]
        out.append(scale * (q[:, :, t, :, None] * state).sum(-2))
    o = torch.stack(out, dim=2).transpose(1, 2) if T else v.new_zeros(B, 0, H, V)
    return o.to(v.dtype), (state if output_final_state else None)
