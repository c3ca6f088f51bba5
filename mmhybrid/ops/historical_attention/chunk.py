"""Historical attention (HAViT Eq. 5-7) in query blocks, with a block-wise backward.

Per block of query rows the forward pass forms the mixed logits
:math:`A = \\alpha\\, Q K^T s + (1 - \\alpha) H`, writes them into the new history
(when it is asked for) and adds ``softmax(A) V`` to the output. Nothing N x N is
kept besides the history itself.

The backward pass recomputes each block of probabilities ``P = softmax(A)`` from the
saved new history (or, when the history is not returned, from Q, K and the
incoming history) and uses the standard softmax identities, with ``G = dL/dO`` and
``delta = rowsum(G * O)``:

* ``dV = P^T G``, ``dA = P * (G V^T - delta) + dL/dA_out``,
* ``dQ = alpha s dA K``, ``dK = alpha s dA^T Q``, ``dH = (1 - alpha) dA``.

Elementwise work on the blocks is done in place. Attention dropout draws its masks
block by block from a generator seeded once per call, and the backward pass replays
them. Products run in the input dtype (tensor cores on GPU); logits, probabilities
and the history are in fp32 at least (fp64 inputs stay fp64). Peak extra memory is
a few (B, heads, rows, N) blocks, ``rows`` chosen so that a block holds about
``block_elements`` numbers.

A traced graph (ONNX export, torch.compile, torch.export) must serve every N, so
there the op is one block of plain ops differentiated by autograd, with
``F.dropout`` for the attention dropout (:func:`_single_block_historical_attention`).
"""
import torch
import torch.nn.functional as F

from ..heads import acc_dtype, rows_per_block, spans
from ..tracing import is_tracing

BLOCK_ELEMENTS = 1 << 24


def _mixed(q_blk, kt, history, start, end, alpha, scale, acc, out=None):
    """Mixed logits of rows ``start:end``, (B, heads, rows, N) in ``acc``, written
    into ``out`` (a slice of the new history) when given."""
    logits = q_blk * (alpha * scale)
    if out is not None and logits.dtype == acc:
        mixed = torch.matmul(logits, kt, out=out)
    else:
        logits = logits @ kt
        mixed = (logits if logits.dtype == acc else
                 logits.to(acc) if out is None else out.copy_(logits))
    if history is not None and alpha < 1:
        mixed.add_(history[..., start:end, :], alpha=1 - alpha)
    return mixed


def _keep_mask(generator, shape, device, dropout_p):
    """Dropout keep-mask scaled by 1 / (1 - p), drawn from ``generator``."""
    keep = torch.rand(shape, generator=generator, device=device) >= dropout_p
    return keep / (1 - dropout_p)


class _ChunkHistoricalAttention(torch.autograd.Function):

    @staticmethod
    def forward(ctx, q, k, v, history, alpha, scale, dropout_p, return_history,
                block_elements, seed):
        ctx.set_materialize_grads(False)
        B, H, N, _ = q.shape
        acc = acc_dtype(q)
        rows = rows_per_block(q, k, block_elements)
        kt = k.transpose(-2, -1)
        out = v.new_empty(B, H, N, v.shape[-1])
        new_history = (q.new_empty(B, H, N, k.shape[-2], dtype=acc)
                       if return_history else None)
        generator = None
        if dropout_p > 0:
            generator = torch.Generator(device=q.device).manual_seed(seed)
        for start, end in spans(N, rows):
            mixed = _mixed(q[..., start:end, :], kt, history, start, end, alpha,
                           scale, acc, out=(new_history[..., start:end, :]
                                            if return_history else None))
            probs = torch.softmax(mixed, dim=-1)
            if generator is not None:
                probs *= _keep_mask(generator, probs.shape, q.device, dropout_p)
            out[..., start:end, :] = probs.to(v.dtype) @ v
        # the new history is what the backward pass reads; without it, the
        # incoming one (which the caller keeps alive anyway) and Q, K rebuild A
        saved = new_history if return_history else history
        ctx.save_for_backward(q, k, v, out, saved)
        ctx.history_meta = (None if history is None else
                            (history.shape, history.dtype))
        ctx.alpha, ctx.scale, ctx.dropout_p = alpha, scale, dropout_p
        ctx.return_history, ctx.rows, ctx.seed = return_history, rows, seed
        return out, new_history

    @staticmethod
    def backward(ctx, grad_out, grad_history):
        q, k, v, out, saved = ctx.saved_tensors
        alpha, scale, dropout_p = ctx.alpha, ctx.scale, ctx.dropout_p
        acc = acc_dtype(q)
        B, H, N, _ = q.shape
        if grad_out is None:
            grad_out = torch.zeros_like(out)
        grad_out = grad_out.contiguous()
        # rowsum(G * O) = rowsum(P * dL/dP), also with dropout (O holds the mask)
        delta = (grad_out.to(acc) * out.to(acc)).sum(-1, keepdim=True)
        kt, vt = k.transpose(-2, -1), v.transpose(-2, -1)
        grad_q = torch.empty_like(q)
        grad_k = torch.zeros(k.shape, dtype=acc, device=k.device)
        grad_v = torch.zeros(v.shape, dtype=acc, device=v.device)
        grad_in = None
        if ctx.needs_input_grad[3]:
            shape, dtype = ctx.history_meta
            grad_in = torch.empty(shape, dtype=dtype, device=q.device)
        generator = None
        if dropout_p > 0:
            generator = torch.Generator(device=q.device).manual_seed(ctx.seed)
        for start, end in spans(N, ctx.rows):
            q_blk = q[..., start:end, :]
            g_blk = grad_out[..., start:end, :]
            if ctx.return_history:
                mixed = saved[..., start:end, :]
            else:
                mixed = _mixed(q_blk, kt, saved, start, end, alpha, scale, acc)
            probs = torch.softmax(mixed, dim=-1)
            grad_mixed = (g_blk @ vt).to(acc)  # dL/dP, then dL/dA in place
            if generator is not None:
                keep = _keep_mask(generator, probs.shape, q.device, dropout_p)
                grad_mixed.mul_(keep)
                probs_v = (probs * keep).to(v.dtype)
            else:
                probs_v = probs.to(v.dtype)
            grad_v += (probs_v.transpose(-2, -1) @ g_blk).to(acc)
            grad_mixed.sub_(delta[..., start:end, :]).mul_(probs)
            if grad_history is not None:
                grad_mixed.add_(grad_history[..., start:end, :])
            if grad_in is not None:
                if grad_in.shape[0] == B:
                    grad_in[..., start:end, :].copy_(grad_mixed).mul_(1 - alpha)
                else:  # a history broadcast over the batch
                    grad_in[..., start:end, :] = (1 - alpha) * grad_mixed.sum(
                        0, keepdim=True)
            grad_mixed = grad_mixed.to(q.dtype)
            grad_q[..., start:end, :] = (grad_mixed @ k) * (alpha * scale)
            grad_k += (grad_mixed.transpose(-2, -1) @ q_blk).to(acc) * (
                alpha * scale)
        return (grad_q, grad_k.to(k.dtype), grad_v.to(v.dtype), grad_in, None,
                None, None, None, None, None)


def _single_block_historical_attention(q, k, v, history, alpha, scale, dropout_p,
                                       return_history):
    """Eq. 5-7 in one block: the mixed logits in at least fp32, softmax, dropout."""
    mixed = ((q * (alpha * scale)) @ k.transpose(-2, -1)).to(acc_dtype(q))
    if history is not None and alpha < 1:
        mixed = mixed + (1 - alpha) * history
    probs = torch.softmax(mixed, dim=-1)
    if dropout_p > 0:
        probs = F.dropout(probs, dropout_p)
    return probs.to(v.dtype) @ v, (mixed if return_history else None)


def chunk_historical_attention(q, k, v, history=None, alpha=0.45, scale=None,
                               dropout_p=0., return_history=True,
                               block_elements=BLOCK_ELEMENTS):
    """Historical attention on (B, heads, N, d) in query blocks; see module doc."""
    scale = q.shape[-1]**-0.5 if scale is None else float(scale)
    if is_tracing():
        return _single_block_historical_attention(q, k, v, history, float(alpha), scale,
                                                  float(dropout_p), return_history)
    seed = 0
    if dropout_p > 0:  # from the global RNG: activation checkpointing replays it
        seed = int(torch.randint(1 << 62, (), dtype=torch.int64))
    return _ChunkHistoricalAttention.apply(q, k, v, history, float(alpha), scale,
                                           float(dropout_p), return_history,
                                           block_elements, seed)
