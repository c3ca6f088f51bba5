"""Time the bidirectional WKV backends (forward, forward+backward) vs sequence length.

Prints a table, writes CSV and a PNG plot. Ratios against one C x C linear layer on
the same (B, T, C) input make CPU numbers comparable across machines; absolute
times are only meaningful from a quiet machine (quote GPU figures).

    python tools/benchmark_wkv.py [--device cuda] [--out work_dirs/benchmark_wkv]
"""
import argparse
import csv
import os
import time

import torch

from mmhybrid.ops.wkv import _BACKENDS


def timeit(fn, repeat, device):
    fn()  # warm-up
    if device == 'cuda':
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    if device == 'cuda':
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeat


def run_case(name, B, T, C, device, dtype, repeat):
    w = (torch.rand(C, device=device) * 8 - 5) / T
    u = torch.full((C, ), -1.2, device=device) / T
    k = torch.randn(B, T, C, device=device, dtype=dtype, requires_grad=True)
    v = torch.randn(B, T, C, device=device, dtype=dtype, requires_grad=True)
    fn = _BACKENDS[name]

    def forward():
        with torch.no_grad():
            fn(w, u, k, v)

    def forward_backward():
        fn(w, u, k, v).float().sum().backward()

    if device == 'cuda':
        torch.cuda.reset_peak_memory_stats()
    fwd = timeit(forward, repeat, device)
    fwd_bwd = timeit(forward_backward, repeat, device)
    peak = (torch.cuda.max_memory_allocated() / 2**20
            if device == 'cuda' else float('nan'))
    return fwd, fwd_bwd, peak


def linear_time(B, T, C, device, dtype, repeat):
    layer = torch.nn.Linear(C, C, device=device, dtype=dtype)
    x = torch.randn(B, T, C, device=device, dtype=dtype, requires_grad=True)
    return timeit(lambda: layer(x).float().sum().backward(), repeat, device)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--dtype', default='float32')
    parser.add_argument('--channels', type=int, default=96)
    parser.add_argument('--batch', type=int, default=2)
    parser.add_argument('--lengths', type=int, nargs='+',
                        default=[196, 784, 3136, 12544])
    parser.add_argument('--naive-max', type=int, default=3136,
                        help='longest T for the O(T^2) reference')
    parser.add_argument('--repeat', type=int, default=3)
    parser.add_argument('--out', default='work_dirs/benchmark_wkv')
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    os.makedirs(args.out, exist_ok=True)

    rows = []
    for T in args.lengths:
        lin = linear_time(args.batch, T, args.channels, args.device, dtype,
                          args.repeat)
        for name in ('chunk', 'naive'):
            if name == 'naive' and T > args.naive_max:
                continue
            fwd, fwd_bwd, peak = run_case(name, args.batch, T, args.channels,
                                          args.device, dtype, args.repeat)
            rows.append(dict(backend=name, T=T, fwd_ms=1e3 * fwd,
                             fwd_bwd_ms=1e3 * fwd_bwd, peak_mib=peak,
                             vs_linear=fwd_bwd / lin))

    header = f'{"backend":8} {"T":>7} {"fwd ms":>9} {"fwd+bwd ms":>11} ' \
             f'{"peak MiB":>9} {"x linear":>9}'
    print(f'bi_wkv, B={args.batch} C={args.channels} {args.dtype} on '
          f'{args.device} (torch {torch.__version__})')
    print(header)
    for r in rows:
        print(f'{r["backend"]:8} {r["T"]:7d} {r["fwd_ms"]:9.2f} '
              f'{r["fwd_bwd_ms"]:11.2f} {r["peak_mib"]:9.1f} '
              f'{r["vs_linear"]:9.1f}')
    with open(os.path.join(args.out, 'wkv.csv'), 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)

    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for name in ('chunk', 'naive'):
        pts = [(r['T'], r['fwd_bwd_ms']) for r in rows if r['backend'] == name]
        if pts:
            ax.loglog(*zip(*pts), marker='o', label=name)
    ax.set_xlabel('tokens T')
    ax.set_ylabel('forward + backward (ms)')
    ax.set_title(f'bi_wkv on {args.device}')
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, 'wkv.png'), dpi=120)
    print(f'wrote {args.out}/wkv.csv and wkv.png')


if __name__ == '__main__':
    main()
