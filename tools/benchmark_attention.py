"""Time and peak memory of GLOBAL / LOCAL / EFFATT / ELFATT attention layers at
stage-1 shapes, forward and forward+backward, versus the number of tokens.

Each attention is the full layer a backbone block uses (qkv, attention, LePE,
proj; :mod:`mmhybrid.layers`), at the stage-1 width of CSWin-T (64 channels,
2 heads, stripes of 1) or Swin-T (96 channels, 3 heads, 7x7 windows). GLOBAL is
:func:`mmhybrid.ops.attention.softmax_attention` (flash-attn or SDPA on GPU,
``MMHYBRID_BACKEND=softmax_attention=sdpa|flash`` forces one); ELFATT's local head
uses the same kernel on its blocks.

Stage-1 maps are the input / 4: 224^2 -> 56x56 = 3136 tokens, ..., 512x2048 ->
128x512 = 65536 tokens. On CPU the script runs in reduced mode (float32, the two
smallest sizes, three repeats) unless --full is given; absolute CPU times are only
indicative. Prints a table, writes CSV and a PNG plot:

    python tools/benchmark_attention.py --device cuda --dtype bfloat16
"""
import argparse
import os
import time

import torch

from mmhybrid.layers import (CrossShapedWindowAttention, ELFATTAttention,
                             GlobalAttention, ShiftedWindowAttention)
from mmhybrid.utils.results import write_csv

# stage-1 maps (input / 4) of 224^2, 384^2, 512^2, 512x1024, 512x2048, 1024^2
SHAPES = [(56, 56), (96, 96), (128, 128), (128, 256), (128, 512), (256, 256)]
WIDTHS = {'cswin': (64, 2), 'swin': (96, 3)}


def build(kind, backbone, dims, heads, block_size):
    if kind == 'global':
        return GlobalAttention(dims, heads)
    if kind == 'local':
        return (CrossShapedWindowAttention(dims, heads, split_size=1)
                if backbone == 'cswin' else
                ShiftedWindowAttention(dims, heads, window_size=7, shift=True))
    ratio = 1. if kind == 'effatt' else 0.5
    return ELFATTAttention(dims, heads, block_size=block_size, global_ratio=ratio)


def measure(fn, repeat, device):
    """Mean seconds and peak extra memory (MiB, CUDA only) of ``fn``."""
    fn()  # warm-up (kernel selection, allocator)
    if device == 'cuda':
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    if device == 'cuda':
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / repeat
    peak = ((torch.cuda.max_memory_allocated() - base) / 2**20
            if device == 'cuda' else float('nan'))
    return seconds, peak


def run(kind, args, hw, dtype):
    dims, heads = WIDTHS[args.backbone]
    layer = build(kind, args.backbone, dims, heads, args.block_size)
    layer = layer.to(args.device, dtype)
    x = torch.randn(args.batch, hw[0] * hw[1], dims, device=args.device,
                    dtype=dtype, requires_grad=True)

    def forward():
        with torch.no_grad():
            layer(x, hw)

    def forward_backward():
        layer(x, hw).float().square().mean().backward()

    fwd, fwd_mem = measure(forward, args.repeat, args.device)
    bwd, bwd_mem = measure(forward_backward, args.repeat, args.device)
    return dict(attention=kind, tokens=hw[0] * hw[1], map=f'{hw[0]}x{hw[1]}',
                fwd_ms=1e3 * fwd, fwd_bwd_ms=1e3 * bwd, fwd_peak_mib=fwd_mem,
                fwd_bwd_peak_mib=bwd_mem)


def plot(rows, path, title):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for kind in dict.fromkeys(r['attention'] for r in rows):
        pts = [r for r in rows if r['attention'] == kind]
        n = [r['tokens'] for r in pts]
        axes[0].loglog(n, [r['fwd_bwd_ms'] for r in pts], marker='o', label=kind)
        axes[1].loglog(n, [r['fwd_bwd_peak_mib'] for r in pts], marker='o',
                       label=kind)
    if all(r['fwd_bwd_peak_mib'] != r['fwd_bwd_peak_mib'] for r in rows):  # NaN
        axes[1].text(0.5, 0.5, 'peak memory is measured on CUDA only',
                     ha='center', va='center', transform=axes[1].transAxes)
    axes[0].set_ylabel('forward + backward (ms)')
    axes[1].set_ylabel('peak memory, forward + backward (MiB)')
    for ax in axes:
        ax.set_xlabel('stage-1 tokens N')
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--device', default='cuda' if torch.cuda.is_available()
                        else 'cpu')
    parser.add_argument('--dtype', default=None,
                        help='bfloat16 on CUDA, float32 on CPU by default')
    parser.add_argument('--backbone', choices=sorted(WIDTHS), default='cswin')
    parser.add_argument('--batch', type=int, default=1)
    parser.add_argument('--block-size', type=int, default=49)
    parser.add_argument('--repeat', type=int, default=None)
    parser.add_argument('--full', action='store_true',
                        help='all sizes on CPU too (slow)')
    parser.add_argument('--max-global-tokens', type=int, default=None,
                        help='skip GLOBAL above this many tokens')
    parser.add_argument('--out', default='work_dirs/benchmark_attention')
    args = parser.parse_args()
    cuda = args.device.startswith('cuda')
    reduced = not cuda and not args.full
    dtype = getattr(torch, args.dtype or ('bfloat16' if cuda else 'float32'))
    args.repeat = args.repeat or (20 if cuda else 3)
    shapes = SHAPES[:2] if reduced else SHAPES
    os.makedirs(args.out, exist_ok=True)

    rows = []
    for hw in shapes:
        for kind in ('global', 'local', 'effatt', 'elfatt'):
            if (kind == 'global' and args.max_global_tokens
                    and hw[0] * hw[1] > args.max_global_tokens):
                continue
            rows.append(run(kind, args, hw, dtype))
            if cuda:
                torch.cuda.empty_cache()

    device = torch.cuda.get_device_name() if cuda else 'cpu'
    title = (f'{args.backbone} stage 1 ({WIDTHS[args.backbone][0]} ch, '
             f'{WIDTHS[args.backbone][1]} heads), batch {args.batch}, '
             f'{str(dtype).replace("torch.", "")}, {device}'
             + (' [reduced]' if reduced else ''))
    print(title, f'torch {torch.__version__}')
    print(f'{"attention":9} {"map":>8} {"N":>6} {"fwd ms":>9} {"fwd+bwd ms":>11} '
          f'{"fwd MiB":>9} {"f+b MiB":>9} {"vs global":>9}')
    fastest_global = {r['tokens']: r['fwd_bwd_ms'] for r in rows
                      if r['attention'] == 'global'}
    for r in rows:
        ratio = fastest_global.get(r['tokens'], float('nan')) / r['fwd_bwd_ms']
        r['speedup_vs_global_fwd_bwd'] = ratio
        print(f'{r["attention"]:9} {r["map"]:>8} {r["tokens"]:6d} {r["fwd_ms"]:9.2f} '
              f'{r["fwd_bwd_ms"]:11.2f} {r["fwd_peak_mib"]:9.1f} '
              f'{r["fwd_bwd_peak_mib"]:9.1f} {ratio:8.2f}x')
    csv_path = os.path.join(args.out, f'attention_{args.backbone}.csv')
    write_csv(rows, csv_path)
    png_path = os.path.join(args.out, f'attention_{args.backbone}.png')
    plot(rows, png_path, title)
    print(f'wrote {csv_path} and {png_path}')


if __name__ == '__main__':
    main()
