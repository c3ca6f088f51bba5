"""ELFATT-SD attention (ELFATT Appendix H, Eq. 18/19), training-free.

The heads of a pretrained self-attention layer are split in two groups, as the
two heads of Eq. 19: the first ``global_heads`` heads use agent attention with
agents pooled from the queries (the global head; Agent replaces EFFATT because it
needs no training), the other heads exact softmax attention inside contiguous
blocks of ``block_size`` tokens (the local blockify head). LePE is removed.
Agent-SD's two extras (a broadcast logit scale ``s ** k_scale2`` and a ``V``
shortcut), which Eq. 18 does not have, are options of the global heads.
"""
import torch

from ..ops import agent_attention, block_attention


def elfatt_sd_attention(q, k, v, agents, block_size, global_heads, scale=None,
                        broadcast_scale=None, shortcut=0.):
    r"""``[softmax(Q̄ Ā^T) softmax(Ā K̄^T) V̄, g(softmax(f(Q̃) f(K̃)^T) f(Ṽ))]``.

    Args:
        q, k, v: (B, heads, N, d).
        agents: (B, global_heads, n, d) agent tokens of the global heads.
        block_size (int): tokens per block of the local heads.
        global_heads (int): heads ``[0, global_heads)`` are global, the rest
            local; 0 gives block attention only, ``heads`` agent attention only.
        scale (float, optional): logit scale; ``d ** -0.5`` when None.
        broadcast_scale (float, optional), shortcut (float): Agent-SD's extras
            of the global heads, see :func:`mmhybrid.ops.agent_attention`.
    Returns:
        (B, heads, N, d).
    """
    g = global_heads
    parts = []
    if g > 0:
        parts.append(agent_attention(q[:, :g], k[:, :g], v[:, :g], agents, scale=scale,
                                     broadcast_scale=broadcast_scale, shortcut=shortcut))
    if g < q.shape[1]:
        parts.append(block_attention(q[:, g:], k[:, g:], v[:, g:], block_size, scale=scale))
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
