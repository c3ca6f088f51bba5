"""Pure InfSA (Eq. 11-12) without an N x N buffer: row blocks, recomputing backward.

With :math:`R = [Q K^T s]_+`, :math:`f = \\|R\\|_F` and :math:`U = R V`, the output is
:math:`Z = U / (f + \\epsilon)`. The forward pass sweeps blocks of query rows once,
accumulating ``U`` block by block and ``f^2`` as a running sum (the normaliser is a
scalar per (batch, head), so it is applied after the sweep). In fp16, whose range
cannot hold the unnormalised ``U``, it takes two passes: ``f`` first, then each
normalised block times ``V``. The backward pass recomputes each block of ``R``
instead of storing it:

* ``dL/df = -<G, Z> / (f + eps)`` (one reduction over the saved output),
* ``dR = G V^T / (f + eps) + (dL/df) R / f``, ``dS = dR * [S > 0]``,
* ``dQ = s dS K``, ``dK = s dS^T Q``, ``dV = R^T G / (f + eps)``.

Peak extra memory is one (B, heads, rows, N) block; ``rows`` is chosen so that the
block holds about ``block_elements`` numbers. Products run in the input dtype (tensor
cores on GPU), the squared norm is accumulated in fp32 (fp64 inputs stay fp64).

A traced graph (ONNX export, torch.compile, torch.export) must serve every N, so
there the op is one block of plain ops, differentiated by autograd: the N x N
matrix is formed once.
"""
import torch

from ..heads import acc_dtype, rows_per_block, spans
from ..tracing import is_tracing

BLOCK_ELEMENTS = 1 << 25


class _ChunkPureInfSA(torch.autograd.Function):

    @staticmethod
    def forward(ctx, q, k, v, scale, eps, block_elements):
        rows = rows_per_block(q, k, block_elements)
        blocks = spans(q.shape[-2], rows)
        kt = k.transpose(-2, -1)
        acc = acc_dtype(q)
        # fp16 cannot hold the unnormalised R V (sums of N scores): find the norm
        # in a first pass and normalise each block before the product.
        two_pass = q.dtype == torch.float16
        sq_norm = q.new_zeros(q.shape[:2], dtype=acc)
        if two_pass:
            for start, end in blocks:
                block = torch.relu(q[..., start:end, :] @ kt * scale)
                sq_norm += block.to(acc).square().sum((-2, -1))
        norm = sq_norm.sqrt()
        inv = (1 / (norm + eps))[..., None, None]
        out = v.new_empty(*q.shape[:-1], v.shape[-1])
        for start, end in blocks:
            block = torch.relu(q[..., start:end, :] @ kt * scale)
            if two_pass:
                block = block * inv.to(block.dtype)
            else:
                sq_norm += block.to(acc).square().sum((-2, -1))
            out[..., start:end, :] = block @ v
        if not two_pass:
            norm = sq_norm.sqrt()
            out = (out.to(acc) / (norm + eps)[..., None, None]).to(v.dtype)
        ctx.save_for_backward(q, k, v, out, norm)
        ctx.scale, ctx.eps, ctx.rows = scale, eps, rows
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, norm = ctx.saved_tensors
        scale, eps = ctx.scale, ctx.eps
        acc = norm.dtype
        denom = (norm + eps)[..., None, None]
        grad_out = grad_out.contiguous()
        # dL/df / f, guarded for an all-zero attention matrix (then R = 0 too).
        grad_norm = -(grad_out.to(acc) * out.to(acc)).sum((-2, -1)) / (norm + eps)
        coef = (grad_norm / norm.clamp_min(1e-30))[..., None, None]
        g_scaled = (grad_out.to(acc) / denom).to(v.dtype)
        kt, vt = k.transpose(-2, -1), v.transpose(-2, -1)
        grad_q = torch.empty_like(q)
        grad_k = torch.zeros(k.shape, dtype=acc, device=k.device)
        grad_v = torch.zeros(v.shape, dtype=acc, device=v.device)
        for start, end in spans(q.shape[-2], ctx.rows):
            q_blk, g_blk = q[..., start:end, :], g_scaled[..., start:end, :]
            block = torch.relu(q_blk @ kt * scale)
            grad_v += (block.transpose(-2, -1) @ g_blk).to(acc)
            grad_s = (g_blk @ vt).to(acc) + coef * block.to(acc)
            grad_s = (grad_s * (block > 0)).to(q.dtype)
            grad_q[..., start:end, :] = grad_s @ k * scale
            grad_k += (grad_s.transpose(-2, -1) @ q_blk).to(acc) * scale
        return grad_q, grad_k.to(k.dtype), grad_v.to(v.dtype), None, None, None


def chunk_pure_infsa(q, k, v, scale=None, eps=1e-6, block_elements=BLOCK_ELEMENTS):
    """Pure InfSA on (B, heads, N, d) with O(block) extra memory; see module doc."""
    scale = q.shape[-1]**-0.5 if scale is None else float(scale)
    if not is_tracing():
        return _ChunkPureInfSA.apply(q, k, v, scale, eps, block_elements)
    # one block: R normalised by its Frobenius norm (in at least fp32) before R V
    attn = torch.relu(q @ k.transpose(-2, -1) * scale)
    norm = attn.to(acc_dtype(q)).square().sum((-2, -1))
    return (attn * (1 / (norm.sqrt() + eps)).to(attn.dtype)[..., None, None]) @ v
