"""ToMe bipartite soft matching on a 2D token grid (ToMe-SD's random 2D variant).

The grid is cut into ``sy x sx`` windows; one token per complete window is a
destination (dst), every other token a source (src). Each src finds its most
cosine-similar dst, and the ``r`` src with the highest similarity are merged into
their dst. The result is a *slot map*: for every token, the index of the merged
token it belongs to. Surviving tokens keep their raster order in the slot
numbering, so contiguous runs of merged tokens stay spatially contiguous (what the
ELFATT local head's blocks rely on). :func:`merge_tokens` averages the tokens of
each slot, :func:`unmerge_tokens` gives every token its slot's value.
"""
import torch


def random_dst_mask(hw_shape, stride=(2, 2), generator=None):
    """Boolean (H * W,) mask of destination tokens, one per complete window.

    Args:
        hw_shape: (H, W) of the token grid.
        stride: (sy, sx) window size.
        generator (torch.Generator, optional): CPU generator choosing the dst
            position inside each window at random; None picks the top-left token.
    """
    H, W = hw_shape
    sy, sx = stride
    hs, ws = H // sy, W // sx
    choice = (torch.zeros(hs, ws, dtype=torch.long) if generator is None else
              torch.randint(sy * sx, (hs, ws), generator=generator))
    windows = torch.zeros(hs, ws, sy * sx, dtype=torch.bool)
    windows.scatter_(2, choice[..., None], True)
    mask = torch.zeros(H, W, dtype=torch.bool)
    mask[:hs * sy, :ws * sx] = windows.view(hs, ws, sy, sx).permute(0, 2, 1, 3).reshape(
        hs * sy, ws * sx)
    return mask.flatten()


def bipartite_soft_matching(metric, dst_mask, r):
    """Merge the ``r`` src tokens most similar to a dst token into that dst.

    Args:
        metric: (B, N, C) features compared by cosine similarity.
        dst_mask: (N,) bool, True for dst tokens (see :func:`random_dst_mask`).
        r (int): tokens to remove; clipped to the number of src tokens.
    Returns:
        slot (Tensor): (B, N) long, the merged token each token belongs to; the
            slots of surviving tokens increase in raster order.
        num_slots (int): N - r, the merged sequence length.
    """
    B, N, _ = metric.shape
    dst_idx = dst_mask.nonzero().squeeze(1).to(metric.device)  # a CPU mask: no sync
    src_idx = (~dst_mask).nonzero().squeeze(1).to(metric.device)
    r = min(r, src_idx.numel())
    metric = metric / metric.norm(dim=-1, keepdim=True)
    scores = metric[:, src_idx] @ metric[:, dst_idx].transpose(1, 2)  # (B, Ns, Nd)
    best_score, best_dst = scores.max(dim=-1)
    order = torch.sort(best_score, dim=-1, descending=True, stable=True).indices
    merged = order[:, :r]  # (B, r), indices into src_idx
    merged_pos = src_idx[merged]  # (B, r), grid positions
    keep = torch.ones(B, N, dtype=torch.bool, device=metric.device)
    keep.scatter_(1, merged_pos, False)
    slot = keep.cumsum(dim=1) - 1
    target_pos = dst_idx[best_dst.gather(1, merged)]
    slot.scatter_(1, merged_pos, slot.gather(1, target_pos))
    return slot, N - r


def merge_tokens(x, slot, num_slots):
    """Average the tokens of each slot: (B, N, C) -> (B, num_slots, C).

    A dst token and the src tokens merged into it become their mean, as ToMe-SD's
    ``mean`` merge; a token alone in its slot is copied unchanged. Sum and count by
    ``scatter_add`` (about 4x faster than ``scatter_reduce(mean)`` on the CPU).
    """
    B, N, C = x.shape
    sums = x.new_zeros(B, num_slots, C).scatter_add(1, slot[..., None].expand(-1, -1, C), x)
    counts = x.new_zeros(B, num_slots).scatter_add(1, slot, x.new_ones(()).expand(B, N))
    return sums / counts[..., None]


def unmerge_tokens(y, slot):
    """Give every token the value of its slot: (B, num_slots, C) -> (B, N, C)."""
    return y.gather(1, slot[..., None].expand(-1, -1, y.shape[-1]))
