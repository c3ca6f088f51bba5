"""The local blockify head of ELFATT: exact softmax attention inside token blocks."""
import torch
import torch.nn.functional as F

from ..attention import softmax_attention
from ..tracing import is_tracing


def masked_attention(q, k, v, mask, scale=None):
    """``softmax(Q K^T s + log(mask)) V`` written out: the traced form of the local
    heads (no reshapes inside, unlike the decomposed ``scaled_dot_product_attention``,
    so torch.export adds no size guards). ``mask`` (bool) broadcasts to the logits;
    every row must keep a key."""
    scale = q.shape[-1]**-0.5 if scale is None else scale
    logits = torch.matmul(q, k.transpose(-2, -1)) * scale
    logits = logits.masked_fill(~mask, float('-inf'))
    return torch.matmul(torch.softmax(logits, dim=-1), v)


def block_attention(q, k, v, block_size, scale=None):
    r"""``g(softmax(f(Q) f(K)^T / sqrt(d)) f(V))``: the second term of ELFATT Eq. 8.

    ``f`` cuts the token sequence into contiguous blocks of ``block_size`` tokens
    (the last block may be shorter) and ``g`` puts them back in order; every token
    attends exactly to the tokens of its own block. Full blocks form one batched
    :func:`~mmhybrid.ops.attention.softmax_attention` call with no mask, so
    FlashAttention applies on GPU; a shorter last block is its own call.
    That equals padding the last block and masking the padding (the reference
    :func:`naive_block_attention`), without a mask that would rule out
    FlashAttention. Cost O(N * block_size * d). A traced graph (ONNX export,
    torch.compile, torch.export) serves every N: there the sequence is padded to
    whole blocks and the padded keys are masked out, in one call.

    Args:
        q, k: (B, heads, N, d); v: (B, heads, N, dv).
        block_size (int): tokens per block; ``>= N`` gives plain global attention.
        scale (float, optional): logit scale; ``d ** -0.5`` when None.
    Returns:
        (B, heads, N, dv).
    """
    if q.shape != k.shape or q.shape[:-1] != v.shape[:-1]:
        raise ValueError(f'q, k must be (B, heads, N, d) and v (B, heads, N, dv); '
                         f'got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}')
    if block_size < 1:
        raise ValueError(f'block_size must be >= 1, got {block_size}')
    B, heads, N, d = q.shape
    if is_tracing():
        # explicit sizes (no -1) and index_select rather than [:N]: no size
        # guards for torch.export
        nb = (N + block_size - 1) // block_size

        def padded_blocks(t):  # 4-D for the ONNX exporters
            t = F.pad(t, (0, 0, 0, nb * block_size - N))
            return t.unflatten(2, (nb, block_size)).flatten(0, 1)

        valid = torch.arange(nb * block_size, device=q.device) < N  # real keys
        out = masked_attention(padded_blocks(q), padded_blocks(k), padded_blocks(v),
                               valid.unflatten(0, (nb, 1, block_size)), scale)
        out = out.unflatten(0, (B, heads)).flatten(2, 3)
        return out.index_select(2, torch.arange(N, device=q.device))
    num_full = N // block_size
    split = num_full * block_size
    outs = []
    if num_full:
        # (B, h, split, d) -> (B*h, num_full, block, d): a view, B and h merge.
        def blocks(t):
            return t[:, :, :split].reshape(B * heads, num_full, block_size,
                                           t.shape[-1])

        out = softmax_attention(blocks(q), blocks(k), blocks(v), scale=scale)
        outs.append(out.reshape(B, heads, split, -1))
    if split < N:
        outs.append(softmax_attention(
            q[:, :, split:], k[:, :, split:], v[:, :, split:], scale=scale))
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)
