"""Eager PyTorch vs torch.compile vs onnxruntime on the CPU, one thread, one run.

Each runtime runs in its own process (its own peak memory): the model is built as
``tools/deploy/export.py`` builds it, a (1, 3, H, W) input is run once to warm up
(for torch.compile that call compiles; for onnxruntime the model is first exported
with dynamic H/W by the TorchScript exporter, and its output checked against eager),
then ``--repeat`` times. Printed per runtime: the minimum time, its ratio to eager,
the set-up time (compile / export + session) and the peak resident memory of the
process (``ru_maxrss``) above what it held after building the model.

``--whole-image SIZE ...`` benchmarks mmseg inference (``EncoderDecoder.inference``,
the logits resized to the image) of whole segmentor configs at SIZE x SIZE instead:
``--models`` with ``test_cfg`` ``mode='whole'``, ``--slide-models`` with
``mode='slide'`` (512^2 crops, stride 341, mmseg's ADE20K setting),
``--banded-models`` with the UPerHead's full-resolution tail in bands of rows
(``tools/deploy/banded_head.py``: the labels, not the logits), and
``--backbone-models``: the config's backbone alone on the whole image. One call per
case, each case in its own process, ``--time-cap`` seconds each (a case over it is
a row with the peak RSS it had reached, and the model's larger sizes are not run);
CSV and PNG under ``--out``, ``--append`` keeping the rows already there.
"""
import argparse
import json
import os
import os.path as osp
import resource
import subprocess
import sys
import tempfile
import time

import torch

HERE = osp.dirname(osp.abspath(__file__))
RUNTIMES = ('eager', 'compile', 'onnxruntime')


def _rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_one(args):
    """One runtime in this process; returns a result dict."""
    sys.path.insert(0, HERE)
    from export import _as_tuple, build, export_onnx, onnx_runner, relative_error
    torch.set_num_threads(1)
    model = build(args.model, args.checkpoint, args.part, args.cfg_options)
    x = torch.randn(1, 3, *args.shape)
    base = _rss_mib()
    start = time.perf_counter()
    if args.runtime == 'onnxruntime':
        path = osp.join(tempfile.mkdtemp(), 'model.onnx')
        run = onnx_runner(export_onnx(model, x, path, 'torchscript'), threads=1)
        step = lambda: run(x)  # noqa: E731
    else:
        fn = model if args.runtime == 'eager' else torch.compile(model)
        no_grad = torch.inference_mode if args.runtime == 'eager' else torch.no_grad
        step = no_grad()(lambda: fn(x))
    out = step()
    setup = time.perf_counter() - start
    with torch.inference_mode():
        ref = model(x)
    error = getattr(model, 'parity_error', relative_error)
    err = error([torch.as_tensor(o) for o in _as_tuple(out)], _as_tuple(ref))
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return dict(runtime=args.runtime, time_s=min(times), setup_s=setup,
                peak_mib=_rss_mib() - base, rel_err=err)


SLIDE = dict(mode='slide', crop_size=(512, 512), stride=(341, 341))


def whole_image_one(args):
    """One inference call of ``args.model`` at ``args.shape`` in this process."""
    sys.path.insert(0, HERE)
    from export import build
    torch.set_num_threads(1)
    model = build(args.model, part='model')
    from mmengine.config import ConfigDict
    model.test_cfg = ConfigDict(SLIDE if args.mode == 'slide' else dict(mode='whole'))
    H, W = args.shape
    meta = dict(img_shape=(H, W), ori_shape=(H, W), pad_shape=(H, W),
                padding_size=[0, 0, 0, 0])
    x = torch.randn(1, 3, H, W)
    base = _rss_mib()
    start = time.perf_counter()
    with torch.inference_mode():
        if args.mode == 'backbone':
            model.backbone(x)
        elif args.mode == 'banded':
            from banded_head import banded_predict
            banded_predict(model, x)
        else:
            model.inference(x, [meta])
    return dict(time_s=time.perf_counter() - start, peak_mib=_rss_mib(),
                extra_mib=_rss_mib() - base)


def _watched(cmd, cap):
    """Run one case, reading its peak RSS (``VmHWM``) every second: its JSON result,
    or an error with the peak it had reached (over ``cap`` seconds, or killed, e.g.
    by the kernel when memory ran out)."""
    with tempfile.TemporaryFile('w+') as out, tempfile.TemporaryFile('w+') as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True,
                                env=dict(os.environ, OMP_NUM_THREADS='1'))
        start, peak = time.perf_counter(), 0.
        while proc.poll() is None and time.perf_counter() - start < cap:
            try:
                with open(f'/proc/{proc.pid}/status') as f:
                    hwm = next(line for line in f if line.startswith('VmHWM'))
                peak = max(peak, int(hwm.split()[1]) / 1024)
            except (OSError, StopIteration):  # it ended between poll and open
                pass
            time.sleep(1)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            return dict(error=f'over {cap:g} s', peak_mib=peak)
        if proc.returncode:
            err.seek(0)
            why = (err.read().strip().splitlines() or [''])[-1][-120:]
            return dict(error=f'exit {proc.returncode}: {why}' if proc.returncode > 0
                        else f'killed by signal {-proc.returncode}', peak_mib=peak)
        out.seek(0)
        return json.loads(out.read().strip().splitlines()[-1])


def whole_image(args):
    """Every (model, size) case in its own process; returns the rows."""
    rows = []
    for mode, models in (('whole', args.models), ('slide', args.slide_models),
                         ('banded', args.banded_models),
                         ('backbone', args.backbone_models)):
        for model in models:
            for size in sorted(args.whole_image):
                cmd = [sys.executable, __file__, model, '--shape', str(size),
                       str(size), '--mode', mode, '--runtime', 'eager']
                row = dict(model=model, mode=mode, size=size)
                row.update(_watched(cmd, args.time_cap))
                rows.append(row)
                print(json.dumps(row), flush=True)
                if 'error' in row:
                    break  # failed or over the cap: larger sizes are not run
    return rows


def report_whole_image(rows, out, append=False):
    import csv

    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    from mmhybrid.utils.results import write_csv
    fields = ['model', 'mode', 'size', 'time_s', 'peak_mib', 'extra_mib', 'error']
    if append and osp.exists(out + '.csv'):
        with open(out + '.csv') as f:
            old = [{k: v if k in ('model', 'mode', 'error') else
                    int(v) if k == 'size' else float(v)
                    for k, v in r.items() if v} for r in csv.DictReader(f)]
        rows = old + rows
    write_csv(rows, out + '.csv', fields)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for (model, mode) in dict.fromkeys((r['model'], r['mode']) for r in rows):
        done = [r for r in rows if (r['model'], r['mode']) == (model, mode)]
        label = f'{osp.basename(model)[:40]} ({mode})'
        for ax, key in zip(axes, ('time_s', 'peak_mib')):
            pts = [(r['size'], r[key]) for r in done if r.get(key) is not None
                   and (key == 'peak_mib' or 'error' not in r)]
            if pts:
                ax.loglog(*zip(*pts), 'o-', label=label)
    for ax, name in zip(axes, ('time of one call (s)', 'peak RSS (MiB)')):
        ax.set_xlabel('image side (px)')
        ax.set_ylabel(name)
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out + '.png', dpi=120)
    print('| model | mode | size | time (s) | peak RSS (MiB) | note |')
    print('|---|---|---|---|---|---|')
    for r in rows:
        t = f"{r['time_s']:.1f}" if 'time_s' in r else ''
        m = f"{r['peak_mib']:.0f}" if r.get('peak_mib') else ''
        print(f"| {r['model']} | {r['mode']} | {r['size']}² | {t} | {m} | "
              f"{r.get('error', '')} |")


def parse_args(argv=None):
    from mmengine.config import DictAction
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('model', nargs='?', help='config file or backbone type')
    parser.add_argument('checkpoint', nargs='?')
    parser.add_argument('--shape', nargs=2, type=int, default=(512, 512))
    parser.add_argument('--repeat', type=int, default=5)
    parser.add_argument('--part', choices=('backbone', 'segmentor', 'detector'),
                        default='backbone')
    parser.add_argument('--runtimes', nargs='+', choices=RUNTIMES,
                        default=list(RUNTIMES))
    parser.add_argument('--runtime', choices=RUNTIMES, help=argparse.SUPPRESS)
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, default={})
    parser.add_argument('--whole-image', nargs='+', type=int, metavar='SIZE',
                        help='mmseg inference of segmentor configs at these sizes')
    parser.add_argument('--models', nargs='+', default=[],
                        help='--whole-image: configs run with mode=whole')
    parser.add_argument('--slide-models', nargs='+', default=[],
                        help='--whole-image: configs run with mode=slide')
    parser.add_argument('--banded-models', nargs='+', default=[],
                        help='--whole-image: UPerNet configs run whole with the '
                        'head tail in bands (tools/deploy/banded_head.py)')
    parser.add_argument('--backbone-models', nargs='+', default=[],
                        help='--whole-image: configs whose backbone alone is run')
    parser.add_argument('--append', action='store_true',
                        help='--whole-image: keep the rows already in --out.csv')
    parser.add_argument('--mode', choices=('whole', 'slide', 'banded', 'backbone'),
                        help=argparse.SUPPRESS)
    parser.add_argument('--time-cap', type=float, default=900.)
    parser.add_argument('--out', default='docs/figures/whole_image_cpu')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.runtime:
        print(json.dumps(whole_image_one(args) if args.mode else run_one(args)))
        return 0
    if args.whole_image:
        report_whole_image(whole_image(args), args.out, args.append)
        return 0
    rows = []
    for runtime in args.runtimes:
        cmd = [sys.executable, __file__] + (argv or sys.argv[1:]) + [
            '--runtime', runtime]
        env = dict(os.environ, OMP_NUM_THREADS='1')
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode:
            rows.append(dict(runtime=runtime, error=proc.stderr.strip()[-300:]))
        else:
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    eager = next((r['time_s'] for r in rows if r.get('runtime') == 'eager'
                  and 'time_s' in r), None)
    print(f'{args.model} {args.shape[0]}x{args.shape[1]}, batch 1, 1 thread, '
          f'min of {args.repeat}')
    print('| runtime | time (s) | vs eager | set-up (s) | peak extra RSS (MiB) '
          '| rel err vs eager |')
    print('|---|---|---|---|---|---|')
    for r in rows:
        if 'error' in r:
            print(f"| {r['runtime']} | failed: {r['error']} | | | | |")
            continue
        ratio = f"{eager / r['time_s']:.2f}x" if eager else ''
        print(f"| {r['runtime']} | {r['time_s']:.3f} | {ratio} | {r['setup_s']:.1f} "
              f"| {r['peak_mib']:.0f} | {r['rel_err']:.1e} |")
    return 0


if __name__ == '__main__':
    sys.exit(main())
