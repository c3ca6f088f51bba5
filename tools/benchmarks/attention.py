"""GLOBAL / LOCAL / EFFATT / ELFATT attention layers at stage-1 shapes, forward
and forward + backward, versus the number of tokens.

Each attention is the full layer a backbone block uses (qkv, attention, LePE,
proj; :mod:`mmhybrid.layers`), at the stage-1 width of CSWin-T (64 channels, 2
heads, stripes of 1) or Swin-T (96 channels, 3 heads, 7x7 windows). GLOBAL is
:func:`mmhybrid.ops.attention.softmax_attention` (flash-attn or SDPA on GPU,
``MMHYBRID_ATTN_BACKEND`` forces one); ELFATT's local head uses the same kernel.
Stage-1 maps are the input / 4: 224^2 -> 56x56 = 3136 tokens, ..., 512x2048 ->
128x512 = 65536 tokens. On the CPU only the two smallest maps run unless
``--full``.
"""
import os

import torch

from common import markdown_table, min_time, peak_mib, plot, save

# stage-1 maps (input / 4) of 224^2, 384^2, 512^2, 512x1024, 512x2048, 1024^2
SHAPES = [(56, 56), (96, 96), (128, 128), (128, 256), (128, 512), (256, 256)]
WIDTHS = {'cswin': (64, 2), 'swin': (96, 3)}
KINDS = ('global', 'local', 'effatt', 'elfatt')


def add_arguments(parser):
    parser.add_argument('--backbone', choices=sorted(WIDTHS), default='cswin')
    parser.add_argument('--dtype', default=None,
                        help='bfloat16 on CUDA, float32 on CPU by default')
    parser.add_argument('--batch', type=int, default=1)
    parser.add_argument('--block-size', type=int, default=49)
    parser.add_argument('--full', action='store_true',
                        help='all sizes on the CPU too (slow)')
    parser.add_argument('--max-global-tokens', type=int, default=None,
                        help='skip GLOBAL above this many tokens')


def default_repeat(args):
    return 20 if args.device == 'cuda' else 3


def build(kind, backbone, dims, heads, block_size):
    from mmhybrid.layers import (CrossShapedWindowAttention, ELFATTAttention,
                                 ShiftedWindowAttention, SoftmaxAttention)
    if kind == 'global':
        return SoftmaxAttention(dims, heads, lepe=True)
    if kind == 'local':
        return (CrossShapedWindowAttention(dims, heads, split_size=1)
                if backbone == 'cswin' else
                ShiftedWindowAttention(dims, heads, window_size=7, shift=True))
    ratio = 1. if kind == 'effatt' else 0.5
    return ELFATTAttention(dims, heads, block_size=block_size, global_ratio=ratio)


def run(kind, args, hw, dtype):
    dims, heads = WIDTHS[args.backbone]
    layer = build(kind, args.backbone, dims, heads, args.block_size).to(
        args.device, dtype)
    x = torch.randn(args.batch, hw[0] * hw[1], dims, device=args.device,
                    dtype=dtype, requires_grad=True)

    def forward():
        with torch.no_grad():
            layer(x, hw)

    def forward_backward():
        layer(x, hw)[0].float().square().mean().backward()

    return dict(attention=kind, tokens=hw[0] * hw[1], map=f'{hw[0]}x{hw[1]}',
                fwd_ms=1e3 * min_time(forward, args.repeat, args.device),
                fwd_bwd_ms=1e3 * min_time(forward_backward, args.repeat,
                                          args.device),
                fwd_peak_mib=peak_mib(forward, args.device),
                fwd_bwd_peak_mib=peak_mib(forward_backward, args.device))


def main(args):
    cuda = args.device == 'cuda'
    dtype = getattr(torch, args.dtype or ('bfloat16' if cuda else 'float32'))
    reduced = not cuda and not args.full
    rows = []
    for hw in SHAPES[:2] if reduced else SHAPES:
        for kind in KINDS:
            if (kind == 'global' and args.max_global_tokens
                    and hw[0] * hw[1] > args.max_global_tokens):
                continue
            rows.append(run(kind, args, hw, dtype))
            print(f"  {kind} {rows[-1]['map']}: {rows[-1]['fwd_bwd_ms']:.1f} ms",
                  flush=True)
    glob = {r['tokens']: r['fwd_bwd_ms'] for r in rows if r['attention'] == 'global'}
    for r in rows:
        r['speedup_vs_global_fwd_bwd'] = (glob[r['tokens']] / r['fwd_bwd_ms']
                                          if r['tokens'] in glob else None)
    dims, heads = WIDTHS[args.backbone]
    title = (f'{args.backbone} stage 1 ({dims} ch, {heads} heads), batch '
             f'{args.batch}, {str(dtype)[6:]}, {args.device_name}'
             f'{" [reduced]" if reduced else ""}; torch {torch.__version__}')
    print('\n' + title)
    print(markdown_table(rows, [
        ('attention', 'attention', ''), ('map', 'map', ''), ('N', 'tokens', 'd'),
        ('fwd ms', 'fwd_ms', '.2f'), ('fwd+bwd ms', 'fwd_bwd_ms', '.2f'),
        ('fwd MiB', 'fwd_peak_mib', '.1f'), ('f+b MiB', 'fwd_bwd_peak_mib', '.1f'),
        ('f+b speed-up vs global', 'speedup_vs_global_fwd_bwd', '.1f')]))
    os.makedirs(args.out, exist_ok=True)
    stem = save(rows, args.out, f'attention_{args.backbone}')
    series_t, series_m = {}, {}
    for r in rows:
        series_t.setdefault(r['attention'], []).append((r['tokens'], r['fwd_bwd_ms']))
        series_m.setdefault(r['attention'], []).append((r['tokens'],
                                                        r['fwd_bwd_peak_mib']))
    plot([('stage-1 tokens N', 'forward + backward [ms]', series_t),
          ('stage-1 tokens N', 'peak memory, forward + backward [MiB]', series_m)],
         stem + '.png', title)
    print(f'wrote {stem}.csv and {stem}.png')
