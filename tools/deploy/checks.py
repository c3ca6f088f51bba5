"""torch.compile checks shared by the deploy table and the tests."""
import torch
from export import _as_tuple, relative_error


def compile_check(model, x, backward=False, backend='inductor'):
    """Relative error of ``torch.compile(model, fullgraph=True)`` against eager.

    The forward outputs, and with ``backward`` the gradients of the input and of
    every parameter (of a fixed random projection of the outputs: the plain mean
    of a normalised output has gradients that are rounding noise), are compared;
    any graph break raises (``fullgraph=True``). Returns max |diff| / max |eager|
    over all.
    """
    import torch._dynamo
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    results = []
    weights = None
    for fn in (model, compiled):
        model.zero_grad(set_to_none=True)
        inp = x.clone().requires_grad_(backward)
        with torch.set_grad_enabled(backward):
            outs = _as_tuple(fn(inp))
            if backward:
                if weights is None:
                    gen = torch.Generator().manual_seed(0)
                    weights = [torch.randn(o.shape, generator=gen) for o in outs]
                sum((o.float() * w).sum() for o, w in zip(outs, weights)).backward()
        tensors = [o.detach() for o in outs]
        if backward:
            tensors.append(inp.grad)
            tensors += [p.grad for p in model.parameters() if p.grad is not None]
        results.append(tensors)
    torch._dynamo.reset()
    # a detector's graph pairs its detections (ties may come in either order)
    return getattr(model, 'parity_error', relative_error)(results[1], results[0])
