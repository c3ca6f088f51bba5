"""Regenerate the deployment table: every tiny backbone and the two whole models
(UPerNet, Mask R-CNN) of ``tools/deploy/cases.py`` x {ONNX (TorchScript exporter) +
onnxruntime, ONNX (dynamo exporter) + onnxruntime, torch.export,
torch.compile(fullgraph) forward + backward (forward only for a detector's graph)}.

Exports have dynamic batch, H and W, are made at ``--shape`` and checked at
``export.default_check_shapes`` (off the patch and 32-pixel grids, a keep-ratio
test size; ``tools/deploy/export.py``); a cell gives the worst relative error or
the reason for failing (refusals included). The compile cell compares outputs and
all gradients with eager, with no graph break allowed.
"""
import argparse
import datetime
import os
import os.path as osp
import platform
import sys
import tempfile
import time

import torch

from tools.deploy.cases import NAMES, WHOLE_MODELS, build_case
from tools.deploy.export import (compile_check, default_check_shapes, error_line,
                                 export_and_check)

COLUMNS = ('ONNX TorchScript + ORT', 'ONNX dynamo + ORT', 'torch.export',
           'torch.compile fwd+bwd')


def _cell(ok, lines):
    if ok:
        errs = [float(line.split('rel err ')[1]) for line in lines if 'rel err' in line]
        return f'ok {max(errs):.0e}'
    reason = next((line for line in lines if line.startswith('refused: ')
                   and 'does not match' not in line), None)
    if reason:
        return 'refused (' + reason[len('refused: '):][:100] + ')'
    fails = [line.strip() for line in lines if 'FAIL' in line or 'Error' in line]
    return 'wrong: ' + (fails[0][:80] if fails else '?')


def row(name, shape, backend, tmp):
    cells = []
    for fmt, exporter in (('onnx', 'torchscript'), ('onnx', 'dynamo'),
                          ('torch-export', None)):
        try:
            ok, lines = export_and_check(build_case(name), shape,
                                         osp.join(tmp, f'{name}.bin'), fmt,
                                         exporter or 'torchscript')
            cells.append(_cell(ok, lines))
        except Exception as err:
            cells.append('fails: ' + error_line(err, 80))
    try:
        model = build_case(name)
        backward = getattr(model, 'differentiable', True)  # not a detector's graph
        err = compile_check(model, torch.randn(2, 3, *shape), backward, backend)
        cells.append((f'ok {err:.0e}' if err < 1e-4 else f'differs {err:.0e}') +
                     ('' if backward else ' (forward)'))
    except Exception as err:
        cells.append('fails: ' + error_line(err, 80))
    return cells


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    names = NAMES + sorted(WHOLE_MODELS)
    parser.add_argument('--cases', nargs='+', default=names, choices=names)
    parser.add_argument('--shape', nargs=2, type=int, default=(64, 96))
    parser.add_argument('--backend', default='inductor')
    parser.add_argument('--out', help='also write the table to this file')
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    import onnxruntime
    start = time.time()
    lines = [f'| model | {" | ".join(COLUMNS)} |', '|---' * (len(COLUMNS) + 1) + '|']
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.cases:
            lines.append(f'| {name} | ' + ' | '.join(
                row(name, tuple(args.shape), args.backend, tmp)) + ' |')
            print(lines[-1], flush=True)
    header = (f'Generated {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC by '
              f'`python tools/deploy/table.py {" ".join(argv or sys.argv[1:])}` '
              f'in {time.time() - start:.0f} s on {platform.machine()}, '
              f'{os.cpu_count()} cores, torch {torch.__version__}, onnxruntime '
              f'{onnxruntime.__version__}, compile backend {args.backend}; export '
              f'at {args.shape[0]}x{args.shape[1]}, checked at '
              f'{", ".join(f"{h}x{w}" for h, w in default_check_shapes(args.shape))}.')
    text = '\n'.join([header, ''] + lines) + '\n'
    print(text)
    if args.out:
        with open(args.out, 'w') as f:
            f.write(text)
    return 0


if __name__ == '__main__':
    sys.exit(main())
