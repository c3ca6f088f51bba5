"""Reference ToMe merge, token by token with Python loops (tests only)."""
import torch


def naive_tome_merge(x, metric, dst_mask, r):
    """Merge ``x`` by bipartite soft matching on ``metric``, written out plainly.

    Every src token picks the dst of highest cosine similarity (first on ties);
    the ``r`` src with the highest such similarity (earliest on ties) are merged;
    each dst becomes the mean of itself and its merged src; survivors are listed
    in raster order.

    Returns:
        merged (B, N - r, C) and groups: per batch, for each merged token the
        list of grid positions it averages.
    """
    B, N, _ = x.shape
    dst = [i for i in range(N) if dst_mask[i]]
    src = [i for i in range(N) if not dst_mask[i]]
    r = min(r, len(src))
    merged, groups = [], []
    for b in range(B):
        unit = metric[b] / metric[b].norm(dim=-1, keepdim=True)
        choice = {}
        for s in src:
            sims = [float(unit[s] @ unit[d]) for d in dst]
            best = max(range(len(dst)), key=lambda j: (sims[j], -j))
            choice[s] = (sims[best], dst[best])
        ranked = sorted(range(len(src)), key=lambda j: (-choice[src[j]][0], j))
        removed = {src[j] for j in ranked[:r]}
        members = {p: [p] for p in range(N) if p not in removed}
        for s in removed:
            members[choice[s][1]].append(s)
        order = sorted(members)
        groups.append([sorted(members[p]) for p in order])
        merged.append(torch.stack([x[b, members[p]].mean(dim=0) for p in order]))
    return torch.stack(merged), groups
