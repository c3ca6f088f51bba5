"""Eager PyTorch vs torch.compile vs onnxruntime on the CPU, one thread, one run.

    OMP_NUM_THREADS=1 python tools/deploy/benchmark.py CONFIG_OR_BACKBONE \\
        [--shape H W] [--repeat N] [--part backbone|segmentor] [--cfg-options ...]

Each runtime runs in its own process (its own peak memory): the model is built as
``tools/deploy/export.py`` builds it, a (1, 3, H, W) input is run once to warm up
(for torch.compile that call compiles; for onnxruntime the model is first exported
with dynamic H/W by the TorchScript exporter, and its output checked against eager),
then ``--repeat`` times. Printed per runtime: the minimum time, its ratio to eager,
the set-up time (compile / export + session) and the peak resident memory of the
process (``ru_maxrss``) above what it held after building the model.
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
    from export import build, export_onnx, onnx_runner, relative_error
    torch.set_num_threads(1)
    model = build(args.model, args.checkpoint, args.part, args.cfg_options)
    x = torch.randn(1, 3, *args.shape)
    base = _rss_mib()
    start = time.perf_counter()
    if args.runtime == 'eager':
        def step():
            with torch.inference_mode():
                return model(x)
    elif args.runtime == 'compile':
        compiled = torch.compile(model)

        def step():
            with torch.no_grad():
                return compiled(x)
    else:
        path = osp.join(tempfile.mkdtemp(), 'model.onnx')
        export_onnx(model, x, path, 'torchscript')
        step = (lambda run: lambda: run(x))(onnx_runner(path, threads=1))
    out = step()
    setup = time.perf_counter() - start
    with torch.inference_mode():
        ref = model(x)
    err = relative_error([torch.as_tensor(o) for o in
                          (out if isinstance(out, (tuple, list)) else [out])],
                         ref if isinstance(ref, (tuple, list)) else [ref])
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return dict(runtime=args.runtime, time_s=min(times), setup_s=setup,
                peak_mib=_rss_mib() - base, rel_err=err)


def parse_args(argv=None):
    from mmengine.config import DictAction
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('model', help='config file or backbone type')
    parser.add_argument('checkpoint', nargs='?')
    parser.add_argument('--shape', nargs=2, type=int, default=(512, 512))
    parser.add_argument('--repeat', type=int, default=5)
    parser.add_argument('--part', choices=('backbone', 'segmentor'),
                        default='backbone')
    parser.add_argument('--runtimes', nargs='+', choices=RUNTIMES,
                        default=list(RUNTIMES))
    parser.add_argument('--runtime', choices=RUNTIMES, help=argparse.SUPPRESS)
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, default={})
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.runtime:
        print(json.dumps(run_one(args)))
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
