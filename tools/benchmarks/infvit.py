"""Inference latency and peak memory vs resolution: Linear / Pure InfViT and a ViT.

The three models share the InfViT scaffold (patch 16, same width, depth and MLP)
and differ only in the token mixer: linear InfSA, pure InfSA, softmax (the paper's
"standard ViT of equal depth"). Each (model, resolution) runs in a fresh process,
so the peak is that run's own: ``torch.cuda.max_memory_allocated`` on GPU, the
process's peak RSS on CPU (weights, activations and the Python/torch runtime).
Ratios are against the ViT. GPU (paper anchor: Linear 4L, 231 img/s at 1024^2 on
an A100, 9216^2 fits 40 GB)::

    python tools/benchmarks/run.py --suite infvit --device cuda --dtype float16 \\
        --resolutions 224 512 1024 2048 4096 9216
"""
import os

import torch

from common import markdown_table, min_time, plot, process_peak_mib, run_child, save

MODELS = {'linear': 'L', 'pure': 'P', 'vit': 'S'}


def add_arguments(parser):
    parser.add_argument('--dtype', default='float32')
    parser.add_argument('--depth', default='4', choices=['4', '24', 'b'],
                        help='4 / 24 layers (width 1024) or ViT-B size')
    parser.add_argument('--models', nargs='+', default=list(MODELS),
                        choices=list(MODELS))
    parser.add_argument('--resolutions', type=int, nargs='+',
                        default=[224, 512, 1024, 2048])
    parser.add_argument('--quadratic-max', type=int, default=1024,
                        help='largest resolution for pure InfSA and the ViT')
    parser.add_argument('--batch', type=int, default=1)
    parser.add_argument('--markdown', help='append the table to this file')


def default_repeat(args):
    return 1


def single(case, args):
    """One model at one resolution in this process."""
    from mmhybrid.models.backbones import InfViT
    arch = {'4': 'linear-4l', '24': 'linear-24l', 'b': 'linear-b'}[args.depth]
    name, res = case['model'], case['res']
    if name == 'linear':
        model = InfViT(arch=arch)
    else:  # pure and softmax use the paper's 16-head layout of the same width
        model = InfViT(arch=arch.replace('linear', 'pure'), attn_types=MODELS[name])
    dtype = getattr(torch, args.dtype)
    model = model.to(device=args.device, dtype=dtype).eval()
    x = torch.randn(args.batch, 3, res, res, device=args.device, dtype=dtype)
    if args.device == 'cuda':
        torch.cuda.reset_peak_memory_stats()

    def forward():
        with torch.inference_mode():
            model(x)

    # --repeat 0: a single call, timed (what a memory check needs)
    seconds = min_time(forward, max(args.repeat, 1), args.device,
                       warmup=1 if args.repeat else 0)
    return dict(latency_ms=1e3 * seconds, img_per_s=args.batch / seconds,
                peak_mb=process_peak_mib(args.device),
                params_m=sum(p.numel() for p in model.parameters()) / 1e6)


def main(args):
    rows = []
    argv = ['--device', args.device, '--threads', str(args.threads), '--repeat',
            str(args.repeat), '--dtype', args.dtype, '--depth', args.depth,
            '--batch', str(args.batch)]
    for res in args.resolutions:
        for name in args.models:
            if name != 'linear' and res > args.quadratic_max:
                continue
            row = run_child('infvit', dict(model=name, res=res), argv)
            row.update(model=f'{name}-{args.depth}l', res=res,
                       tokens=(-(-res // 16))**2)
            rows.append(row)
            print(f"  {name} @ {res}: {row.get('latency_ms', row['status'])} ms",
                  flush=True)
    vit = {r['res']: r for r in rows if r['model'].startswith('vit') and
           r['status'] == 'ok'}
    for r in rows:
        ref, ok = vit.get(r['res']), r['status'] == 'ok'
        r['speedup_vs_vit'] = ref['latency_ms'] / r['latency_ms'] if ok and ref else None
        r['mem_vs_vit'] = r['peak_mb'] / ref['peak_mb'] if ok and ref else None
    peak = 'max allocated' if args.device == 'cuda' else 'process RSS'
    title = (f'InfViT {args.depth}L inference, batch {args.batch}, {args.dtype}, '
             f'{args.device_name}; peak = {peak}; torch {torch.__version__}')
    text = markdown_table(rows, [
        ('model', 'model', ''), ('res', 'res', 'd'), ('tokens', 'tokens', 'd'),
        ('latency ms', 'latency_ms', '.1f'), ('img/s', 'img_per_s', '.2f'),
        ('peak MB', 'peak_mb', '.0f'), ('speed-up vs ViT', 'speedup_vs_vit', '.2f'),
        ('memory vs ViT', 'mem_vs_vit', '.2f'), ('status', 'status', '')])
    print(f'\n{title}\n{text}')
    if args.markdown:
        with open(args.markdown, 'a') as f:
            f.write(f'\n### {title}\n\n{text}\n')
    os.makedirs(args.out, exist_ok=True)
    stem = save(rows, args.out, 'infvit', [
        'model', 'res', 'tokens', 'status', 'latency_ms', 'img_per_s', 'peak_mb',
        'params_m', 'speedup_vs_vit', 'mem_vs_vit'])
    series_t, series_m = {}, {}
    for r in rows:
        if r['status'] == 'ok':
            series_t.setdefault(r['model'], []).append((r['res'], r['latency_ms']))
            series_m.setdefault(r['model'], []).append((r['res'], r['peak_mb']))
    plot([('resolution [px]', 'latency [ms]', series_t),
          ('resolution [px]', 'peak memory [MB]', series_m)], stem + '.png', title)
    print(f'wrote {stem}.csv and {stem}.png')
