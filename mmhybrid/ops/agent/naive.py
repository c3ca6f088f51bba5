"""Reference agent attention with explicit softmax matrices (tests only)."""
import torch


def naive_agent_attention(q, k, v, agents, scale=None):
    """softmax(Q A^T s) @ (softmax(A K^T s) @ V), materialising both maps."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    agent_v = torch.softmax(agents @ k.transpose(-2, -1) * scale, dim=-1) @ v
    return torch.softmax(q @ agents.transpose(-2, -1) * scale, dim=-1) @ agent_v
