"""torch.compile checks shared by the deploy table and the tests."""
import torch


def _flat(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out, )


def compile_check(model, x, backward=False, backend='inductor'):
    """Relative error of ``torch.compile(model, fullgraph=True)`` against eager.

    The forward outputs, and with ``backward`` the gradients of the input and of
    every parameter (of the sum of the outputs' means), are compared; any graph
    break raises (``fullgraph=True``). Returns max |diff| / max |eager| over all.
    """
    import torch._dynamo
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    results = []
    for fn in (model, compiled):
        model.zero_grad(set_to_none=True)
        inp = x.clone().requires_grad_(backward)
        with torch.set_grad_enabled(backward):
            outs = _flat(fn(inp))
            if backward:
                sum(o.float().mean() for o in outs).backward()
        tensors = [o.detach() for o in outs]
        if backward:
            tensors.append(inp.grad)
            tensors += [p.grad for p in model.parameters() if p.grad is not None]
        results.append(tensors)
    torch._dynamo.reset()
    ref, got = results
    if len(ref) != len(got):
        raise RuntimeError(f'{len(got)} compiled results, eager has {len(ref)}')
    return max(((g - r).abs().max() / r.abs().max().clamp_min(1e-12)).item()
               for g, r in zip(got, ref))
