"""Reference bidirectional WKV: Eq. 9 of SoLA-Vision evaluated term by term.

O(T^2 C) time and memory; meant for tests (works in float64).
"""
import torch


def naive_bi_wkv(w, u, k, v):
    r"""wkv_t = (sum_{i!=t} e^{-(|t-i|-1) w + k_i} v_i + e^{u + k_t} v_t) / (same, v = 1).

    Args:
        w, u: (C,) decay and bonus, already scaled (the layer divides by T).
        k, v: (B, T, C).
    """
    T = k.shape[1]
    pos = torch.arange(T, device=k.device)
    dist = (pos[:, None] - pos[None, :]).abs().to(k.dtype)  # (T, T)
    logits = -(dist[..., None] - 1) * w + k[:, None, :, :]  # (B, T, T, C)
    diag = (u + k)  # (B, T, C)
    # dist == 0, not eye(dtype=bool): onnxruntime has no boolean EyeLike
    logits = torch.where((dist == 0)[..., None], diag[:, :, None, :], logits)
    weights = torch.softmax(logits, dim=2)
    return (weights * v[:, None, :, :]).sum(dim=2)
