"""Throughput and peak memory of UPerNet backbones: ours vs mmseg's, one run.

Models come from configs, built through the registries: ours from ``configs/``
(SoLA-T/B, Swin-T-ELFATT, CSWin-T-ELFATT, InfiniteVL-T, InfViT-Linear-4L) and mmseg's own Swin-T,
Swin-B and ViT-B UPerNet configs shipped in the installed mmseg (``mmseg::...``).
Each case runs in its own process (its own peak memory; an out-of-memory error or a
run past ``--time-cap`` seconds is a table row, not a crash).

GPU mode (default with CUDA): the whole UPerNet. Training steps at 512x512 (AMP,
``--train-batch`` images, forward + backward + AdamW step) and whole-image
inference at 512x2048, 2048x2048 and 4096x4096 (AMP, batch 1)::

    python tools/benchmark_backbones.py --device cuda

CPU reduced mode (default without CUDA): backbones only, square inputs
``--sizes`` up to ``--max-size``, batch 1, inference, ``--threads`` threads (1 by
default: run nothing else on the machine). Prints each backbone's scaling exponent
of time vs pixels (least-squares slope in log-log) and its time relative to mmseg's
Swin-T at each size::

    OMP_NUM_THREADS=1 python tools/benchmark_backbones.py --device cpu --max-size 2048

Writes ``backbones_<device>.csv`` and ``.png`` under ``--out``.
"""
import argparse
import importlib
import json
import math
import os
import os.path as osp
import resource
import subprocess
import sys
import time

import torch

from mmhybrid.utils.results import write_csv

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
MODELS = {
    'sola-t': 'configs/sola/upernet_sola-t_ade20k.py',
    'sola-b': 'configs/sola/upernet_sola-b_ade20k.py',
    'swin-t-elfatt': 'configs/elfatt/upernet_swin-t-elfatt_ade20k.py',
    'cswin-t-elfatt': 'configs/elfatt/upernet_cswin-t-elfatt_ade20k.py',
    'infinitevl-t': 'configs/infinitevl/upernet_infinitevl-t_ade20k.py',
    'infvit-linear-4l': 'configs/infvit/upernet_infvit-linear-4l_ade20k.py',
    'mmseg-swin-t': 'mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_'
                    '8xb2-160k_ade20k-512x512.py',
    'mmseg-swin-b': 'mmseg::swin/swin-base-patch4-window7-in1k-pre_upernet_'
                    '8xb2-160k_ade20k-512x512.py',
    'mmseg-vit-b': 'mmseg::vit/vit_vit-b16_mln_upernet_8xb2-160k_ade20k-512x512.py',
}
REFERENCE = 'mmseg-swin-t'
GPU_CASES = [('train', 512, 512), ('infer', 512, 2048), ('infer', 2048, 2048),
             ('infer', 4096, 4096)]


def config_path(path):
    """``pkg::rel`` -> the file shipped in the installed package's ``.mim/configs``;
    other paths are relative to the repository."""
    if '::' not in path:
        return osp.join(ROOT, path)
    package, rel = path.split('::')
    root = osp.dirname(importlib.import_module(package).__file__)
    return osp.join(root, '.mim', 'configs', rel)


def build_segmentor(name):
    """The config's UPerNet segmentor, no pretrained weights, plain BatchNorm."""
    import mmhybrid  # noqa: F401  (registers our modules, fixes mmpretrain)
    from mmengine.config import Config
    from mmengine.model import revert_sync_batchnorm
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS as SEG_MODELS
    cfg = Config.fromfile(config_path(MODELS[name]))
    init_default_scope('mmseg')
    cfg.model.pretrained = None
    cfg.model.backbone.init_cfg = None
    return revert_sync_batchnorm(SEG_MODELS.build(cfg.model))


def _sync(device):
    if device == 'cuda':
        torch.cuda.synchronize()


def _timed(step, device, repeat):
    """Median seconds of ``repeat`` calls after one warm-up call."""
    times = []
    for _ in range(repeat + 1):
        _sync(device)
        start = time.perf_counter()
        step()
        _sync(device)
        times.append(time.perf_counter() - start)
    timed = sorted(times[1:])
    return timed[len(timed) // 2]


def _metas(h, w, batch):
    return [dict(img_shape=(h, w), pad_shape=(h, w), ori_shape=(h, w))
            for _ in range(batch)]


def run_single(name, mode, h, w, args):
    """One case in this process; returns a result dict (status 'OOM' on OOM)."""
    device = args.device
    if device == 'cpu':
        torch.set_num_threads(args.threads)
    model = build_segmentor(name).to(device)
    amp = dict(device_type=device, dtype=getattr(torch, args.amp_dtype),
               enabled=device == 'cuda')
    batch = args.train_batch if mode == 'train' else 1
    x = torch.randn(batch, 3, h, w, device=device)
    if mode == 'backbone':
        module = model.backbone
        module.eval()  # mmseg's SwinTransformer.train() returns None

        def step():
            with torch.inference_mode():
                module(x)
    elif mode == 'infer':
        model.eval()
        metas = _metas(h, w, batch)

        def step():
            with torch.inference_mode(), torch.autocast(**amp):
                model.encode_decode(x, metas)
    else:
        from mmengine.structures import PixelData
        from mmseg.structures import SegDataSample
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        scaler = torch.amp.GradScaler(enabled=args.amp_dtype == 'float16')
        samples = []
        for meta in _metas(h, w, batch):
            sample = SegDataSample(metainfo=meta)
            sample.gt_sem_seg = PixelData(
                data=torch.randint(0, 150, (1, h, w), device=device))
            samples.append(sample)

        def step():
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(**amp):
                losses = model.loss(x, samples)
            loss = sum(v for k, v in losses.items() if 'loss' in k)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
    if device == 'cuda':
        torch.cuda.reset_peak_memory_stats()
    try:
        seconds = _timed(step, device, args.repeat)
    except torch.OutOfMemoryError:
        return dict(status='OOM')
    peak = (torch.cuda.max_memory_allocated() if device == 'cuda' else
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024) / 2**20
    params = model.backbone if mode == 'backbone' else model
    return dict(status='ok', time_ms=1e3 * seconds, img_per_s=batch / seconds,
                peak_mb=peak, batch=batch,
                params_m=sum(p.numel() for p in params.parameters()) / 1e6)


def measure(args, name, mode, h, w):
    """Run one case in a child process, capped at ``args.time_cap`` seconds."""
    row = dict(model=name, mode=mode, size=f'{h}x{w}', pixels=h * w)
    cmd = [sys.executable, osp.abspath(__file__), '--single', name, mode, str(h),
           str(w), '--device', args.device, '--threads', str(args.threads),
           '--repeat', str(args.repeat), '--train-batch', str(args.train_batch),
           '--amp-dtype', args.amp_dtype]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (ROOT, os.environ.get('PYTHONPATH')) if p))
    if args.device == 'cpu':
        env['OMP_NUM_THREADS'] = str(args.threads)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                              timeout=args.time_cap)
    except subprocess.TimeoutExpired:
        return dict(row, status=f'too slow (>{args.time_cap:g} s)')
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith('{')]
    if proc.returncode or not lines:
        err = proc.stderr.strip().splitlines() or ['no output']
        oom = 'out of memory' in proc.stderr.lower() or proc.returncode in (-9, 137)
        print(f'  {name} {mode} {h}x{w}: {err[-1][:160]}', flush=True)
        return dict(row, status='OOM' if oom else 'failed')
    return dict(row, **json.loads(lines[-1]))


def scaling_exponent(rows):
    """Slope of log(time) vs log(pixels) over the rows that ran (>= 2 sizes)."""
    points = [(math.log(r['pixels']), math.log(r['time_ms'])) for r in rows
              if r['status'] == 'ok']
    if len(points) < 2:
        return None
    mx = sum(p[0] for p in points) / len(points)
    my = sum(p[1] for p in points) / len(points)
    sxx = sum((p[0] - mx)**2 for p in points)
    return sum((p[0] - mx) * (p[1] - my) for p in points) / sxx


def add_relative(rows):
    ref = {(r['mode'], r['size']): r for r in rows
           if r['model'] == REFERENCE and r['status'] == 'ok'}
    for r in rows:
        base = ref.get((r['mode'], r['size']))
        ok = r['status'] == 'ok' and base is not None
        r['time_vs_swin_t'] = r['time_ms'] / base['time_ms'] if ok else None
        r['mem_vs_swin_t'] = r['peak_mb'] / base['peak_mb'] if ok else None


def fmt(value, spec):
    return format(value, spec) if isinstance(value, (int, float)) else '-'


def table(rows):
    lines = ['| model | mode | size | batch | ms | img/s | peak MB | time vs Swin-T '
             '| memory vs Swin-T |', '|---|---|---|---|---|---|---|---|---|']
    for r in rows:
        ok = r['status'] == 'ok'
        lines.append(
            f"| {r['model']} | {r['mode']} | {r['size']} | {r.get('batch', '-')} | "
            f"{fmt(r.get('time_ms'), '.1f') if ok else r['status']} | "
            f"{fmt(r.get('img_per_s'), '.2f')} | {fmt(r.get('peak_mb'), '.0f')} | "
            f"{fmt(r.get('time_vs_swin_t'), '.2f')} | "
            f"{fmt(r.get('mem_vs_swin_t'), '.2f')} |")
    return '\n'.join(lines)


def plot(rows, models, path):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name in models:
        ok = [r for r in rows if r['model'] == name and r['status'] == 'ok'
              and r['mode'] != 'train']
        if ok:
            pixels = [r['pixels'] for r in ok]
            axes[0].plot(pixels, [r['time_ms'] for r in ok], 'o-', label=name)
            axes[1].plot(pixels, [r['peak_mb'] for r in ok], 'o-', label=name)
    for ax, label in zip(axes, ('time per image [ms]', 'peak memory [MB]')):
        ax.set_xscale('log')
        ax.set_yscale('log')
        ax.set_xlabel('pixels')
        ax.set_ylabel(label)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--device', choices=['cpu', 'cuda'],
                        default='cuda' if torch.cuda.is_available() else 'cpu')
    parser.add_argument('--models', nargs='+', default=list(MODELS),
                        choices=list(MODELS))
    parser.add_argument('--sizes', type=int, nargs='+',
                        default=[256, 512, 1024, 2048],
                        help='CPU mode: square input sizes')
    parser.add_argument('--max-size', type=int, default=2048,
                        help='CPU mode: drop sizes above this')
    parser.add_argument('--threads', type=int, default=1, help='CPU threads')
    parser.add_argument('--train-batch', type=int, default=8,
                        help='GPU mode: images per 512x512 training step')
    parser.add_argument('--amp-dtype', default='bfloat16',
                        choices=['bfloat16', 'float16'])
    parser.add_argument('--repeat', type=int, default=3,
                        help='timed calls after one warm-up (median reported)')
    parser.add_argument('--time-cap', type=float, default=600.,
                        help='seconds per case (build, warm-up and repeats)')
    parser.add_argument('--out', default='work_dirs/benchmark_backbones')
    parser.add_argument('--single', nargs=4, metavar=('MODEL', 'MODE', 'H', 'W'),
                        help=argparse.SUPPRESS)
    return parser.parse_args()


def main():
    args = parse_args()
    if args.single:
        name, mode, h, w = args.single
        print(json.dumps(run_single(name, mode, int(h), int(w), args)))
        return
    if args.device == 'cpu':
        cases = [('backbone', s, s) for s in args.sizes if s <= args.max_size]
        if args.threads == 1 and os.environ.get('OMP_NUM_THREADS') != '1':
            print('note: each case runs with 1 thread; run nothing else meanwhile')
    else:
        cases = GPU_CASES
    rows = []
    for mode, h, w in cases:
        for name in args.models:
            rows.append(measure(args, name, mode, h, w))
            r = rows[-1]
            took = fmt(r.get('time_ms'), '.1f') if r['status'] == 'ok' else r['status']
            print(f"  {name} {mode} {h}x{w}: {took} ms, "
                  f"{fmt(r.get('peak_mb'), '.0f')} MB", flush=True)
    add_relative(rows)
    if args.device == 'cuda':
        device = f'{torch.cuda.get_device_name()}, AMP {args.amp_dtype}'
        peak = 'max allocated'
    else:
        device = f'CPU, {args.threads} thread(s), float32'
        peak = 'process peak RSS'
    print(f'\nUPerNet backbones, {device}; torch {torch.__version__}; peak = {peak}')
    print(table(rows))
    print('\nscaling exponent of time vs pixels (1.0 = linear):')
    for name in args.models:
        exponent = scaling_exponent(
            [r for r in rows if r['model'] == name and r['mode'] != 'train'])
        print(f'  {name:16} {fmt(exponent, ".2f")}')
    os.makedirs(args.out, exist_ok=True)
    stem = osp.join(args.out, f'backbones_{args.device}')
    keys = ['model', 'mode', 'size', 'pixels', 'batch', 'status', 'time_ms',
            'img_per_s', 'peak_mb', 'params_m', 'time_vs_swin_t', 'mem_vs_swin_t']
    write_csv(rows, stem + '.csv', keys)
    plot(rows, args.models, stem + '.png')
    print(f'wrote {stem}.csv and {stem}.png')


if __name__ == '__main__':
    main()
