"""Time the Gated DeltaNet and sliding-window attention ops vs token count.

For each grid size (tokens N = side^2) and each backend: forward and
forward+backward time, peak CUDA memory, and the ratio to one C x C linear layer
on the same (B, N, C) input (comparable across machines; absolute CPU times mean
something only on a quiet machine). The GDN op runs on 2B sequences, as the
bidirectional 'G' layer calls it; SWA on the (H, W) grid with a 7x7 window,
next to global SDPA for reference.

    python tools/benchmark_gdn_swa.py [--device cuda --dtype bfloat16]
                                      [--sides 14 28 56] [--out DIR]
"""
import argparse
import os
import time

import torch
import torch.nn.functional as F

from mmhybrid.ops import gated_delta_rule, sliding_window_attention
from mmhybrid.ops.delta_rule import fla_gated_delta_rule
from mmhybrid.utils.results import write_csv


def timeit(fn, repeat, device):
    fn()  # warm-up
    best = float('inf')
    for _ in range(repeat):
        if device == 'cuda':
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device == 'cuda':
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def measure(op, tensors, repeat, device):
    def forward():
        with torch.no_grad():
            op(*tensors)

    def forward_backward():
        op(*tensors).float().sum().backward()

    if device == 'cuda':
        torch.cuda.reset_peak_memory_stats()
    fwd, fwd_bwd = (timeit(f, repeat, device) for f in (forward, forward_backward))
    peak = (torch.cuda.max_memory_allocated() / 2**20 if device == 'cuda' else
            float('nan'))
    return fwd, fwd_bwd, peak


def gdn_case(backend, B, N, C, heads, device, dtype):
    d = C // heads
    make = lambda *shape: torch.randn(*shape, device=device, dtype=dtype)  # noqa
    q, k, v = (make(2 * B, N, heads, d).requires_grad_() for _ in range(3))
    g = (-0.1 * torch.rand(2 * B, N, heads, device=device)).requires_grad_()
    beta = torch.rand(2 * B, N, heads, device=device, dtype=dtype).requires_grad_()

    def op(*t):
        return gated_delta_rule(*t, use_qk_l2norm_in_kernel=True,
                                backend=backend)[0]
    return op, (q, k, v, g, beta)


def swa_case(backend, B, side, C, heads, device, dtype):
    q, k, v = (torch.randn(B, heads, side * side, C // heads, device=device,
                           dtype=dtype, requires_grad=True) for _ in range(3))
    if backend == 'global':
        return F.scaled_dot_product_attention, (q, k, v)

    def op(*t):
        return sliding_window_attention(*t, (side, side), 7, backend=backend)
    return op, (q, k, v)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--dtype', default='float32')
    parser.add_argument('--channels', type=int, default=96)
    parser.add_argument('--heads', type=int, default=3)
    parser.add_argument('--batch', type=int, default=2)
    parser.add_argument('--sides', type=int, nargs='+', default=[14, 28, 56])
    parser.add_argument('--naive-max', type=int, default=784,
                        help='largest N for the naive references')
    parser.add_argument('--repeat', type=int, default=3)
    parser.add_argument('--out', default='work_dirs/benchmark_gdn_swa')
    args = parser.parse_args()
    dtype, dev = getattr(torch, args.dtype), args.device
    B, C, heads = args.batch, args.channels, args.heads

    gdn = ['chunk', 'naive'] + (['fla'] if dev == 'cuda' and
                                fla_gated_delta_rule() is not None else [])
    rows = []
    for side in args.sides:
        N = side * side
        layer = torch.nn.Linear(C, C, device=dev, dtype=dtype)
        x = torch.randn(B, N, C, device=dev, dtype=dtype, requires_grad=True)
        lin = timeit(lambda: layer(x).float().sum().backward(), args.repeat, dev)
        cases = [('gdn', b, gdn_case(b, B, N, C, heads, dev, dtype)) for b in gdn]
        cases += [('swa7', b, swa_case(b, B, side, C, heads, dev, dtype))
                  for b in ('halo', 'naive', 'global')]
        for op_name, backend, (op, tensors) in cases:
            if backend == 'naive' and N > args.naive_max:
                continue
            fwd, fwd_bwd, peak = measure(op, tensors, args.repeat, dev)
            rows.append(dict(op=op_name, backend=backend, N=N, fwd_ms=1e3 * fwd,
                             fwd_bwd_ms=1e3 * fwd_bwd, peak_mib=peak,
                             vs_linear=fwd_bwd / lin))

    print(f'B={B} C={C} heads={heads} {args.dtype} on {dev} (torch '
          f'{torch.__version__}); gdn runs 2B sequences (both scans)')
    print(f'{"op":5} {"backend":7} {"N":>6} {"fwd ms":>9} {"fwd+bwd ms":>11} '
          f'{"peak MiB":>9} {"x linear":>9}')
    for r in rows:
        print(f'{r["op"]:5} {r["backend"]:7} {r["N"]:6d} {r["fwd_ms"]:9.2f} '
              f'{r["fwd_bwd_ms"]:11.2f} {r["peak_mib"]:9.1f} '
              f'{r["vs_linear"]:9.1f}')
    path = write_csv(rows, os.path.join(args.out, 'gdn_swa.csv'))
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
