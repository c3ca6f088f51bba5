"""Every registered token mixer as a layer (projections, mixing, LePE, output) at
the stage-1 width of CSWin-T (stripes of 1) or Swin-T (7x7 windows) against
tokens; on the CPU only the two smallest maps unless ``--full``. The mixers come
from the registry (``--mixers`` picks some); a mixer the width cannot hold (e.g.
cross-shaped windows with Swin-T's 3 heads) is skipped with its reason."""
import math

import torch

from tools.benchmarks.common import fwd_bwd, report, torch_dtype

# stage-1 maps of 224^2, 384^2, 512^2, 512x1024, 512x2048, 1024^2
SHAPES = [(56, 56), (96, 96), (128, 128), (128, 256), (128, 512), (256, 256)]
WIDTHS = {'cswin': (64, 2), 'swin': (96, 3)}


def add_arguments(p):
    p.add_argument('--backbone', choices=sorted(WIDTHS), default='cswin')
    p.add_argument('--mixers', nargs='+', help='registered mixer names (default: all)')
    p.add_argument('--batch', type=int, default=1)
    p.add_argument('--block-size', type=int, default=49)
    p.add_argument('--full', action='store_true', help='all sizes on the CPU too')
    p.add_argument('--max-global-tokens', type=int, help='skip softmax above this N')


def build(name, args):
    """The mixer ``name`` at the backbone's stage-1 width, with what its backbone
    would offer it (LePE, 7x7 windows, CSWin's stripes of 1, ELFATT's block)."""
    from mmhybrid.layers import build_mixer
    d, h = WIDTHS[args.backbone]
    context = dict(lepe=True, window_size=7, shift=True, split_size=1,
                   block_size=args.block_size)
    return build_mixer(name, d, h, context)


def main(args):
    from mmhybrid.layers import registered_mixers
    dtype, rows = torch_dtype(args), []
    reduced = args.device == 'cpu' and not args.full
    names = args.mixers or sorted(registered_mixers())
    for hw in SHAPES[:2] if reduced else SHAPES:
        n = hw[0] * hw[1]
        for name in names:
            if name == 'softmax' and n > (args.max_global_tokens or n):
                continue
            try:
                layer = build(name, args).to(args.device, dtype)
            except ValueError as err:
                print(f'  {name}: skipped ({err})', flush=True)
                continue
            x = torch.randn(args.batch, n, WIDTHS[args.backbone][0], device=args.device,
                            dtype=dtype, requires_grad=True)
            rows.append(dict(attention=name, tokens=n, map=f'{hw[0]}x{hw[1]}', **fwd_bwd(
                lambda x: layer(x, hw)[0], [x], list(layer.parameters()), args)))
            print(f"  {name} {rows[-1]['map']}: {rows[-1]['fwd_bwd_ms']:.1f} ms", flush=True)
    glob = {r['tokens']: r['fwd_bwd_ms'] for r in rows if r['attention'] == 'softmax'}
    for r in rows:
        r['speedup_vs_global'] = glob.get(r['tokens'], math.nan) / r['fwd_bwd_ms']
    title = (f'{args.backbone} stage 1 (channels, heads {WIDTHS[args.backbone]}), batch '
             f'{args.batch}, {str(dtype)[6:]}{" [reduced]" if reduced else ""}')
    report(args, f'attention_{args.backbone}', title, rows, [
        ('mixer', 'attention', ''), ('map', 'map', ''), ('N', 'tokens', 'd'),
        ('fwd ms', 'fwd_ms', '.2f'), ('fwd+bwd ms', 'fwd_bwd_ms', '.2f'),
        ('f+b MiB', 'peak_mib', '.1f'),
        ('f+b speed-up vs softmax', 'speedup_vs_global', '.1f')], 'tokens',
        {'fwd_bwd_ms': 'forward + backward [ms]', 'peak_mib': 'peak, f+b [MiB]'},
        lambda r: r['attention'])
