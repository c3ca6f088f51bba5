"""Token layouts and CPU streaming of wide intermediates, shared by the layers.

Eager CPU code runs a wide MLP or conv in slices / row bands, so that each
intermediate stays a slice's (in cache, below the allocator's mmap threshold);
under a graph tracer (export, compile) and where slicing cannot pay, the same
function runs in one call. The layers call these and read like the paper.
"""
import torch

from .tracing import is_tracing


def tokens_to_map(x, hw_shape):
    """(B, H*W, C) tokens -> (B, C, H, W), a channels-last view (no copy)."""
    B, _, C = x.shape
    return x.view(B, *hw_shape, C).permute(0, 3, 1, 2)


def map_to_tokens(x):
    """(B, C, H, W) -> (B, H*W, C); no copy for a channels-last map."""
    B, C = x.shape[:2]
    return x.permute(0, 2, 3, 1).reshape(B, -1, C)


def conv_in_bands(x, hw_shape, before, conv, after, band_tokens=8192):
    """``after(conv(before(x)))`` for (B, H*W, C) tokens and a 'same'-padded conv
    on the token map. Eager, in bands of whole rows of about ``band_tokens``
    tokens (plus ``conv.padding`` recomputed halo rows each side), each band
    written into the output as it comes: the wide intermediates stay a band's,
    in cache and below the allocator's mmap threshold (ConvMlp: 1.3x / 1.6x
    faster at 256^2 / 128^2 tokens, one CPU thread, loaded machine)."""
    H, W = hw_shape
    if is_tracing() or band_tokens >= H * W:
        return after(map_to_tokens(conv(tokens_to_map(before(x), hw_shape))))
    rows, halo, out = max(band_tokens // W, 1), conv.padding[0], None
    for top in range(0, H, rows):
        a, b = max(top - halo, 0), min(top + rows + halo, H)
        h = conv(tokens_to_map(before(x[:, a * W:b * W]), (b - a, W)))
        band = after(map_to_tokens(h[:, :, top - a:min(top + rows, H) - a]))
        out = band.new_empty(x.shape[0], H * W, band.shape[-1]) if out is None else out
        out[:, top * W:(top + rows) * W] = band
    return out


def in_token_slices(fn, *xs, tokens):
    """``fn(*xs)`` for (..., C) token tensors of the same leading sizes, in slices of
    ``tokens`` of their flattened tokens: the wide hidden activation of an MLP is
    then a slice's, in cache and never a fresh, page-faulted allocation of its own
    (on the CPU; at 9216^2 InfViT-Linear's whole-map MLP hidden would be 6 GB). One
    call under a tracer (a loop over a symbolic count pins the size) and on a GPU
    under autograd (the slices would keep their hiddens for backward all the same,
    and cost kernel launches)."""
    flat = [x.reshape(-1, x.shape[-1]) for x in xs]
    n = flat[0].shape[0]
    if is_tracing() or n <= tokens or (flat[0].is_cuda and torch.is_grad_enabled()):
        out = fn(*flat)
    else:
        out = None
        for i in range(0, n, tokens):
            piece = fn(*(x[i:i + tokens] for x in flat))
            out = piece.new_empty(n, piece.shape[-1]) if out is None else out
            out[i:i + tokens] = piece
    return out.view(*xs[0].shape[:-1], -1)
