"""Reference agent attention with explicit softmax matrices (tests only)."""
import torch


def naive_agent_attention(q, k, v, agents, scale=None, broadcast_scale=None, shortcut=0.):
    """softmax(Q A^T s2) @ (softmax(A K^T s) @ V) + shortcut V, materialising
    both maps."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    broadcast_scale = scale if broadcast_scale is None else broadcast_scale
    agent_v = torch.softmax(agents @ k.transpose(-2, -1) * scale, dim=-1) @ v
    out = torch.softmax(q @ agents.transpose(-2, -1) * broadcast_scale, dim=-1) @ agent_v
    return out + shortcut * v
