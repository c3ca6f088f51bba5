"""Speed (and GPU memory) of historical attention vs plain softmax attention.

For each (B, heads, N, d) it times a forward + backward pass of: a C x C linear
layer on the same tokens (the yardstick, C = heads * d), plain softmax attention
(``F.scaled_dot_product_attention``: FlashAttention / memory-efficient kernels on
GPU), the naive historical attention (explicit N x N autograd) and the blocked one
(``chunk``, the default), both with an incoming history and returning the new
one, as a layer inside a chain does. Repeats are interleaved and the minimum is
kept; on CUDA the peak allocated memory of each call is reported too. Prints a
Markdown table and writes CSV.

    python tools/benchmark_historical_attention.py                    # CPU, small
    python tools/benchmark_historical_attention.py --device cuda --dtype bfloat16 \\
        --shapes 2,6,1024,32 2,6,4096,32 1,12,16384,64
"""
import argparse
import os
import time

import torch
import torch.nn.functional as F

from mmhybrid.ops.historical_attention import (chunk_historical_attention,
                                               naive_historical_attention)
from mmhybrid.utils.results import write_csv


def make_calls(B, H, N, d, device, dtype):
    C = H * d
    q, k, v = (torch.randn(B, H, N, d, device=device, dtype=dtype,
                           requires_grad=True) for _ in range(3))
    history = torch.randn(B, H, N, N, device=device, requires_grad=True)
    x = torch.randn(B, N, C, device=device, dtype=dtype, requires_grad=True)
    linear = torch.nn.Linear(C, C).to(device=device, dtype=dtype)

    def backward(out, new_history=None):
        loss = out.float().sum()
        if new_history is not None:
            loss = loss + new_history.sum()
        loss.backward()

    return {
        'linear CxC': lambda: backward(linear(x)),
        'softmax (sdpa)': lambda: backward(F.scaled_dot_product_attention(q, k, v)),
        'historical naive': lambda: backward(*naive_historical_attention(
            q, k, v, history)),
        'historical chunk': lambda: backward(*chunk_historical_attention(
            q, k, v, history)),
    }


def measure(fn, device):
    if device == 'cuda':
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    start = time.perf_counter()
    fn()
    if device == 'cuda':
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    peak = ((torch.cuda.max_memory_allocated() - base) / 2**20
            if device == 'cuda' else float('nan'))
    return seconds, peak


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--shapes', nargs='+', default=['2,6,256,32', '2,6,1024,32'],
                        help='B,heads,N,d')
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--dtype', default='float32')
    parser.add_argument('--repeat', type=int, default=5)
    parser.add_argument('--skip-naive-above', type=int, default=4096,
                        help='skip the naive op for longer sequences')
    parser.add_argument('--out', default='work_dirs/benchmark_historical_attention')
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    rows = []
    for shape in args.shapes:
        B, H, N, d = map(int, shape.split(','))
        calls = make_calls(B, H, N, d, args.device, dtype)
        if N > args.skip_naive_above:
            calls.pop('historical naive')
        best = {name: (float('inf'), float('nan')) for name in calls}
        for _ in range(args.repeat + 1):  # the first round warms up
            for name, fn in calls.items():
                seconds, peak = measure(fn, args.device)
                best[name] = (min(best[name][0], seconds), peak)
        unit = best['linear CxC'][0]
        for name, (seconds, peak) in best.items():
            rows.append(dict(B=B, heads=H, N=N, d=d, op=name, ms=1e3 * seconds,
                             x_linear=seconds / unit, peak_mib=peak,
                             history_mib=B * H * N * N * 4 / 2**20))
    print(f'\ndevice {args.device}, {args.dtype}, forward + backward, min of '
          f'{args.repeat}\n')
    print('| B | heads | N | d | op | ms | x linear | peak MiB | history MiB |')
    print('|---|---|---|---|---|---|---|---|---|')
    for r in rows:
        print(f"| {r['B']} | {r['heads']} | {r['N']} | {r['d']} | {r['op']} | "
              f"{r['ms']:.2f} | {r['x_linear']:.1f} | {r['peak_mib']:.0f} | "
              f"{r['history_mib']:.1f} |")
    path = os.path.join(args.out, f'results_{args.device}.csv')
    write_csv(rows, path)
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
