"""Inference latency and peak memory vs resolution: Linear / Pure InfViT and a ViT.

The three models share the InfViT scaffold (patch 16, same width, depth and MLP)
and differ only in the token mixer: linear InfSA, pure InfSA, softmax (the paper's
"standard ViT of equal depth"). Each (model, resolution) runs in a fresh process,
so the peak is that run's own: ``torch.cuda.max_memory_allocated`` on GPU, the
process's peak RSS on CPU (weights, activations and the Python/torch runtime).
Prints a table with ratios against the ViT, writes CSV and PNG, and with
``--markdown`` appends the table to a Markdown file (docs/benchmarks.md on a GPU).

CPU reduced mode (default)::

    python tools/benchmark_infvit.py --resolutions 224 512 1024 2048 \\
        --quadratic-max 1024
GPU (paper anchor: Linear 4L, 231 img/s at 1024^2 on an A100, 9216^2 fits 40 GB)::

    python tools/benchmark_infvit.py --device cuda --dtype float16 \\
        --resolutions 224 512 1024 2048 4096 9216 --markdown docs/benchmarks.md
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

import torch

from mmhybrid.utils.results import write_csv

MODELS = {'linear': 'L', 'pure': 'P', 'vit': 'S'}


def run_single(model_name, depth, res, device, dtype, repeat, batch):
    """Build one model, time ``repeat`` forwards after a warm-up; returns a dict."""
    from mmhybrid.models.backbones import InfViT
    arch = {'4': 'linear-4l', '24': 'linear-24l', 'b': 'linear-b'}[depth]
    if model_name == 'linear':
        model = InfViT(arch=arch)
    else:
        # pure and softmax use the paper's 16-head layout of the same width
        model = InfViT(arch=arch.replace('linear', 'pure'),
                       attn_types=MODELS[model_name])
    model = model.to(device=device, dtype=dtype).eval()
    x = torch.randn(batch, 3, res, res, device=device, dtype=dtype)
    if device == 'cuda':
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times = []
    with torch.inference_mode():
        for _ in range(repeat + 1):
            start = time.perf_counter()
            model(x)
            if device == 'cuda':
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
    timed = sorted(times[1:] or times)  # the first call is a warm-up
    latency = timed[len(timed) // 2]
    if device == 'cuda':
        peak = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return dict(model=model_name, depth=depth, res=res,
                tokens=(-(-res // 16))**2, latency_ms=1e3 * latency,
                img_per_s=batch / latency, peak_mb=peak,
                params_m=sum(p.numel() for p in model.parameters()) / 1e6)


def measure(args, model_name, res):
    """Run one case in a child process; OOM or failure gives a row without numbers."""
    cmd = [sys.executable, __file__, '--single', model_name, str(res),
           '--device', args.device, '--dtype', args.dtype, '--depth', args.depth,
           '--repeat', str(args.repeat), '--batch', str(args.batch)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith('{')]
    if proc.returncode or not lines:
        tail = (proc.stderr.strip().splitlines() or ['failed'])[-1]
        status = 'OOM' if 'out of memory' in proc.stderr.lower() or \
            proc.returncode in (-9, 137) else 'failed'
        print(f'  {model_name} @ {res}: {status}: {tail[:120]}')
        return dict(model=model_name, depth=args.depth, res=res,
                    tokens=(-(-res // 16))**2, status=status)
    row = json.loads(lines[-1])
    row['status'] = 'ok'
    return row


def add_ratios(rows):
    vit = {r['res']: r for r in rows if r['model'] == 'vit' and r['status'] == 'ok'}
    for r in rows:
        ref = vit.get(r['res'])
        ok = r['status'] == 'ok' and ref is not None
        r['speedup_vs_vit'] = ref['latency_ms'] / r['latency_ms'] if ok else None
        r['mem_ratio_vs_vit'] = r['peak_mb'] / ref['peak_mb'] if ok else None


def fmt(value, spec):
    return format(value, spec) if isinstance(value, (int, float)) else '-'


def table(rows, args):
    head = (f'| model | res | tokens | latency ms | img/s | peak MB | speed-up vs ViT '
            f'| memory vs ViT |\n|---|---|---|---|---|---|---|---|')
    lines = [head]
    for r in rows:
        lines.append(
            f"| {r['model']}-{args.depth}l | {r['res']} | {r['tokens']} | "
            f"{fmt(r.get('latency_ms'), '.1f')} | {fmt(r.get('img_per_s'), '.2f')} | "
            f"{fmt(r.get('peak_mb'), '.0f') if r['status'] == 'ok' else r['status']} | "
            f"{fmt(r.get('speedup_vs_vit'), '.2f')} | "
            f"{fmt(r.get('mem_ratio_vs_vit'), '.2f')} |")
    return '\n'.join(lines)


def plot(rows, path):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for name in MODELS:
        ok = [r for r in rows if r['model'] == name and r['status'] == 'ok']
        if not ok:
            continue
        res = [r['res'] for r in ok]
        axes[0].plot(res, [r['latency_ms'] for r in ok], 'o-', label=name)
        axes[1].plot(res, [r['peak_mb'] for r in ok], 'o-', label=name)
    for ax, label in zip(axes, ('latency [ms]', 'peak memory [MB]')):
        ax.set_xscale('log', base=2)
        ax.set_yscale('log')
        ax.set_xlabel('resolution [px]')
        ax.set_ylabel(label)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--dtype', default='float32')
    parser.add_argument('--depth', default='4', choices=['4', '24', 'b'],
                        help='4 / 24 layers (width 1024) or ViT-B size')
    parser.add_argument('--models', nargs='+', default=list(MODELS))
    parser.add_argument('--resolutions', type=int, nargs='+',
                        default=[224, 512, 1024, 2048])
    parser.add_argument('--quadratic-max', type=int, default=1024,
                        help='largest resolution for pure InfSA and the ViT')
    parser.add_argument('--repeat', type=int, default=1)
    parser.add_argument('--batch', type=int, default=1)
    parser.add_argument('--out', default='work_dirs/benchmark_infvit')
    parser.add_argument('--markdown', help='append the table to this file')
    parser.add_argument('--single', nargs=2, metavar=('MODEL', 'RES'),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    if args.single:
        print(json.dumps(run_single(args.single[0], args.depth,
                                    int(args.single[1]), args.device, dtype,
                                    args.repeat, args.batch)))
        return
    rows = []
    for res in args.resolutions:
        for name in args.models:
            if name != 'linear' and res > args.quadratic_max:
                continue
            rows.append(measure(args, name, res))
            print(f"  {name} @ {res}: {rows[-1].get('latency_ms', '-')} ms, "
                  f"{rows[-1].get('peak_mb', '-')} MB", flush=True)
    add_ratios(rows)
    text = table(rows, args)
    device = (torch.cuda.get_device_name() if args.device == 'cuda' else
              f'CPU ({os.cpu_count()} cores, {torch.get_num_threads()} threads)')
    peak = 'max allocated' if args.device == 'cuda' else 'process RSS'
    title = (f'InfViT {args.depth}L inference, batch {args.batch}, {args.dtype}, '
             f'{device}; peak = {peak}')
    print(title)
    print(text)
    os.makedirs(args.out, exist_ok=True)
    keys = ['model', 'depth', 'res', 'tokens', 'status', 'latency_ms',
            'img_per_s', 'peak_mb', 'params_m', 'speedup_vs_vit',
            'mem_ratio_vs_vit']
    write_csv(rows, os.path.join(args.out, 'infvit.csv'), keys)
    plot(rows, os.path.join(args.out, 'infvit.png'))
    if args.markdown:
        with open(args.markdown, 'a') as f:
            f.write(f'\n### {title}\n\n{text}\n')
    print(f'wrote {args.out}/infvit.csv and infvit.png')


if __name__ == '__main__':
    main()
