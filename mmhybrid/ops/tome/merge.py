"""Merging and unmerging tokens through a slot map (ToMe's average merge)."""


def merge_tokens(x, slot, num_slots):
    """Average the tokens of each slot: (B, N, C) -> (B, num_slots, C).

    A dst token and the src tokens merged into it become their mean, as ToMe-SD's
    ``mean`` merge; a token alone in its slot is copied unchanged.
    """
    B, _, C = x.shape
    index = slot[..., None].expand(-1, -1, C)
    return x.new_zeros(B, num_slots, C).scatter_reduce(
        1, index, x, reduce='mean', include_self=False)


def unmerge_tokens(y, slot):
    """Give every token the value of its slot: (B, num_slots, C) -> (B, N, C)."""
    return y.gather(1, slot[..., None].expand(-1, -1, y.shape[-1]))
