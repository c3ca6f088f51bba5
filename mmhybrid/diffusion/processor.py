"""ELFATT-SD attention (ELFATT Appendix H, Eq. 18/19), training-free, and the
diffusers attention processor that runs it with ToMe-SD merging.

The heads of a pretrained self-attention layer are split in two groups, as the
two heads of Eq. 19: the first ``global_heads`` heads use agent attention with
agents pooled from the queries (the global head; Agent replaces EFFATT because it
needs no training), the other heads exact softmax attention inside contiguous
blocks of ``block_size`` tokens (the local blockify head). LePE is removed.
Agent-SD's two extras (a broadcast logit scale ``s ** k_scale2`` and a ``V``
shortcut), which Eq. 18 does not have, are options of the global heads.
"""
import math

import torch

from ..layers.mixers.base import from_heads, to_heads
from ..ops import agent_attention, block_attention
from ..ops.agent import agent_grid, pool_agent_tokens
from ..ops.tome import bipartite_soft_matching, merge_tokens, random_dst_mask, unmerge_tokens


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
    g, parts = global_heads, []
    if g > 0:
        parts.append(agent_attention(q[:, :g], k[:, :g], v[:, :g], agents, scale=scale,
                                     broadcast_scale=broadcast_scale, shortcut=shortcut))
    if g < q.shape[1]:
        parts.append(block_attention(q[:, g:], k[:, g:], v[:, g:], block_size, scale=scale))
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)


class ToMeElfattProcessor:
    """Self-attention processor of ELFATT-SD (ELFATT Appendix H), see
    :func:`~mmhybrid.diffusion.apply_patch`.

    The attention input is merged by ToMe bipartite soft matching, attended and
    unmerged (ToMe-SD's merge-attention). In the steps the :class:`StepTracker`
    marks, attention is ELFATT-SD or agent attention in every head; otherwise
    the original processor attends the merged tokens. Agents are the pooled
    queries of the full grid (``to_q`` is linear: pooling inputs is the same).
    Calls it does not change (other layers, masks, ratio 0 outside ELFATT steps)
    go to ``original`` untouched, so outputs stay bit-identical there.
    """

    def __init__(self, original, tracker, ratio, mode, block_size, agent_tokens,
                 max_downsample, stride, use_rand, k_scale2=1., k_shortcut=0.):
        self.original, self.tracker, self.ratio, self.mode = original, tracker, ratio, mode
        self.block_size, self.agent_tokens = block_size, agent_tokens
        self.max_downsample, self.stride, self.use_rand = max_downsample, stride, use_rand
        self.k_scale2, self.k_shortcut = k_scale2, k_shortcut

    def __call__(self, attn, hidden_states, encoder_hidden_states=None,
                 attention_mask=None, temb=None, *args, **kwargs):
        def original(x):
            return self.original(attn, x, encoder_hidden_states, attention_mask, temb,
                                 *args, **kwargs)

        hw = self._grid(hidden_states)
        if hw is None or encoder_hidden_states is not None or attention_mask is not None:
            return original(hidden_states)
        r = int(hidden_states.shape[1] * self.ratio)
        elfatt = self.tracker.elfatt_active
        if r == 0 and not elfatt:
            return original(hidden_states)
        x = hidden_states
        if r > 0:
            generator = self.tracker.generator if self.use_rand else None
            dst_mask = random_dst_mask(hw, self.stride, generator)
            slot, num_slots = bipartite_soft_matching(x, dst_mask, r)
            x = merge_tokens(x, slot, num_slots)
        out = self._elfatt(attn, x, hidden_states, hw) if elfatt else original(x)
        return unmerge_tokens(out, slot) if r > 0 else out

    def _grid(self, hidden_states):
        """(h, w) of a layer's tokens if this layer is patched, else None."""
        if hidden_states.ndim != 3 or self.tracker.latent_hw is None:
            return None
        H, W = self.tracker.latent_hw
        N = hidden_states.shape[1]
        downsample = math.ceil(math.sqrt(H * W / N))
        hw = (math.ceil(H / downsample), math.ceil(W / downsample))
        if downsample > self.max_downsample or hw[0] * hw[1] != N:
            return None
        return hw

    def _elfatt(self, attn, x, full, hw):
        """to_out(attention(to_q x, to_k x, to_v x)) with ELFATT-SD or agent heads."""
        heads = attn.heads
        q, k, v = (to_heads(proj(x), heads) for proj in (attn.to_q, attn.to_k, attn.to_v))
        pooled = pool_agent_tokens(full, hw, agent_grid(hw, self.agent_tokens))
        agents = to_heads(attn.to_q(pooled), heads)
        if attn.norm_q is not None:
            q, agents = attn.norm_q(q), attn.norm_q(agents)
        if attn.norm_k is not None:
            k = attn.norm_k(k)
        global_heads = heads if self.mode == 'agent' else heads // 2
        out = elfatt_sd_attention(q, k, v, agents[:, :global_heads], self.block_size,
                                  global_heads, scale=attn.scale,
                                  broadcast_scale=attn.scale**self.k_scale2,
                                  shortcut=self.k_shortcut)
        out = from_heads(out).to(q.dtype)
        return attn.to_out[1](attn.to_out[0](out))
