"""Deployed runtimes and whole-image inference on the CPU, a process per case.

Runtimes (``--model``): eager PyTorch, ``torch.compile`` and onnxruntime on one
(1, 3, H, W) input, the model built as ``tools/deploy/export.py`` builds it. A first
call warms up (torch.compile compiles there; for onnxruntime the model is first
exported with dynamic H/W by the TorchScript exporter), then ``--repeat`` calls.
Per runtime: the minimum time, its ratio to eager, the set-up time, the process's
peak RSS above what it held after building the model, and the output's error
against eager.

Whole image (``--whole-image SIZE ...``): mmseg inference (``EncoderDecoder.inference``,
the logits resized to the image) of segmentor configs at SIZE x SIZE, one call:
``--models`` with ``test_cfg`` ``mode='whole'``, ``--slide-models`` with ``mode='slide'``
(512^2 crops, stride 341, mmseg's ADE20K setting), ``--banded-models`` with the
UPerHead's full-resolution tail in bands of rows (``tools/deploy/banded_head.py``: the
labels, not the logits), ``--backbone-models``: the config's backbone alone. A case
over ``--time-cap`` s or killed is a row with the peak RSS it had reached, and the
model's larger sizes are not run; ``--append`` keeps the rows already in the CSV.
"""
import csv
import os.path as osp
import tempfile
import time

import torch

from tools.benchmarks.common import min_time, process_peak_mib, report, run_child

RUNTIMES = ('eager', 'compile', 'onnxruntime')
REPEAT = 5
SLIDE = dict(mode='slide', crop_size=(512, 512), stride=(341, 341))
MODES = dict(whole='models', slide='slide_models', banded='banded_models',
             backbone='backbone_models')


def add_arguments(p):
    from mmengine.config import DictAction
    p.add_argument('--model', help='runtimes: config file, backbone type or a case '
                   'of tools/deploy/cases.py')
    p.add_argument('--checkpoint')
    p.add_argument('--shape', nargs=2, type=int, default=(512, 512))
    p.add_argument('--part', choices=('backbone', 'segmentor', 'detector'),
                   default='backbone')
    p.add_argument('--runtimes', nargs='+', choices=RUNTIMES, default=list(RUNTIMES))
    p.add_argument('--cfg-options', nargs='+', action=DictAction, default={})
    p.add_argument('--whole-image', nargs='+', type=int, metavar='SIZE',
                   help='mmseg inference of segmentor configs at these sizes')
    for mode, dest in MODES.items():
        p.add_argument('--' + dest.replace('_', '-'), nargs='+', default=[],
                       help=f'--whole-image: configs run in mode {mode}')
    p.add_argument('--append', action='store_true',
                   help='--whole-image: keep the rows already in the CSV')
    p.add_argument('--stem', help='CSV/PNG name (default: deploy_cpu, whole_image_cpu)')
    p.add_argument('--time-cap', type=float, default=900., help='seconds per case')


def runtime_case(runtime, args):
    """One runtime on ``--model`` in this process."""
    from tools.deploy.export import (_as_tuple, build_model, export_onnx, onnx_runner,
                                     relative_error)
    model = build_model(args.model, args.checkpoint, args.part, args.cfg_options)
    x = torch.randn(1, 3, *args.shape)
    base, start = process_peak_mib('cpu'), time.perf_counter()
    if runtime == 'onnxruntime':
        path = osp.join(tempfile.mkdtemp(), 'model.onnx')
        run = onnx_runner(export_onnx(model, x, path, 'torchscript'), args.threads)
        step = lambda: run(x)  # noqa: E731
    else:
        fn = model if runtime == 'eager' else torch.compile(model)
        no_grad = torch.inference_mode if runtime == 'eager' else torch.no_grad
        step = no_grad()(lambda: fn(x))
    out = step()
    setup = time.perf_counter() - start
    with torch.inference_mode():
        ref = model(x)
    error = getattr(model, 'parity_error', relative_error)
    err = error([torch.as_tensor(o) for o in _as_tuple(out)], _as_tuple(ref))
    return dict(time_s=min_time(step, args.repeat, 'cpu', warmup=0), setup_s=setup,
                peak_mib=process_peak_mib('cpu') - base, rel_err=err)


def whole_image_case(model_cfg, mode, size):
    """One inference call of a segmentor config at size x size in this process."""
    from tools.deploy.banded_head import banded_predict
    from tools.deploy.exportable import build
    from mmengine.config import ConfigDict
    model = build(model_cfg, part='model')
    model.test_cfg = ConfigDict(SLIDE if mode == 'slide' else dict(mode='whole'))
    meta = dict(img_shape=(size, size), ori_shape=(size, size),
                pad_shape=(size, size), padding_size=[0, 0, 0, 0])
    x = torch.randn(1, 3, size, size)
    base, start = process_peak_mib('cpu'), time.perf_counter()
    with torch.inference_mode():
        if mode == 'backbone':
            model.backbone(x)
        elif mode == 'banded':
            banded_predict(model, x)
        else:
            model.inference(x, [meta])
    seconds, peak = time.perf_counter() - start, process_peak_mib('cpu')
    return dict(time_s=seconds, peak_mib=peak, extra_mib=peak - base)


def single(case, args):
    if 'runtime' in case:
        return runtime_case(case['runtime'], args)
    return whole_image_case(case['model'], case['mode'], case['size'])


def _read_rows(path):
    """The rows of an earlier CSV, numbers as numbers."""
    def value(v):
        try:
            return int(v) if v.isdigit() else float(v)
        except ValueError:
            return v
    with open(path) as f:
        return [{k: value(v) for k, v in r.items() if v} for r in csv.DictReader(f)]


def whole_image(args):
    """Every (model, size) case; a model's larger sizes stop at its first failure."""
    stem = args.stem or 'whole_image_cpu'
    path = osp.join(args.out, stem + '.csv')
    rows = _read_rows(path) if args.append and osp.exists(path) else []
    for mode, dest in MODES.items():
        for model in getattr(args, dest):
            for size in sorted(args.whole_image):
                row = dict(model=model, mode=mode, size=size)
                row.update(run_child(dict(row), args.time_cap, watch_peak=True))
                rows.append(row)
                print(f"  {model} ({mode}) {size}: {row.get('time_s', '-')} s, "
                      f"{row['status']}", flush=True)
                if row['status'] != 'ok':
                    break
    report(args, stem, 'Whole-image inference, one call', rows,
           [('model', 'model', ''), ('mode', 'mode', ''), ('size', 'size', 'd'),
            ('time (s)', 'time_s', '.1f'), ('peak RSS (MiB)', 'peak_mib', '.0f'),
            ('status', 'status', '')],
           'size', {'time_s': 'time of one call (s)', 'peak_mib': 'peak RSS (MiB)'},
           lambda r: f"{osp.basename(r['model'])[:40]} ({r['mode']})")


def runtimes(args):
    rows = [dict(runtime=r, **run_child(dict(runtime=r), args.time_cap))
            for r in args.runtimes]
    eager = next((r['time_s'] for r in rows if r['runtime'] == 'eager'
                  and r['status'] == 'ok'), None)
    for r in rows:
        r['vs_eager'] = eager / r['time_s'] if eager and 'time_s' in r else None
    report(args, args.stem or 'deploy_cpu',
           f'{args.model} {args.shape[0]}x{args.shape[1]}, batch 1, min of {args.repeat}',
           rows, [('runtime', 'runtime', ''), ('time (s)', 'time_s', '.3f'),
                  ('vs eager', 'vs_eager', '.2f'), ('set-up (s)', 'setup_s', '.1f'),
                  ('peak extra RSS (MiB)', 'peak_mib', '.0f'),
                  ('rel err vs eager', 'rel_err', '.1e'), ('status', 'status', '')])


def main(args):
    if args.device != 'cpu':
        raise SystemExit('the deploy suite runs on the CPU: pass --device cpu')
    if args.whole_image:
        whole_image(args)
    elif args.model:
        runtimes(args)
    else:
        raise SystemExit('pass --model (runtimes) or --whole-image SIZE ... (configs)')
