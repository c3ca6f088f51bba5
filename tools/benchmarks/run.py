"""One runner for every benchmark: ``run.py --suite NAME [options]``.

Suites (one module each in this folder, registered in :data:`SUITES`):

* ``backbones``: UPerNet backbones against mmseg's Swin-T (time, GMACs, GMAC/s,
  time exponent vs pixels, share of the global softmax layers, one UPerNet
  training step); on GPU the whole UPerNet, training and high-resolution
  inference.
* ``ops``: every token-mixing op (WKV, gated delta rule, sliding window, EFFATT,
  ELFATT, InfSA, historical attention, softmax attention) against a C x C linear
  layer at the same stage shapes: time, GMAC/s, ratio, peak memory, forward and
  forward + backward.
* ``attention``: ELFATT / EFFATT / LOCAL / GLOBAL attention layers at stage-1
  shapes of CSWin-T or Swin-T.
* ``infvit``: Linear / Pure InfViT and a softmax ViT, latency and peak memory
  vs resolution.
* ``sd``: Stable Diffusion 1.5 UNet with ELFATT-SD, ToMe-SD and Agent-SD.

The checkout the runner lies in is imported (unless ``PYTHONPATH`` is set).
Shared options: ``--device``, ``--threads`` (CPU, default 1), ``--repeat`` (the
minimum over repeats after a warm-up is reported), ``--malloc default|tuned``
(glibc allocator setting, see docs/benchmarks.md), ``--out``. Every suite
prints a table and writes CSV and PNG under ``--out`` (default
``work_dirs/benchmarks/<suite>``)::

    python tools/benchmarks/run.py --suite backbones --device cpu --threads 1
    python tools/benchmarks/run.py --suite ops --device cuda --dtype bfloat16
    python tools/benchmarks/run.py --suite backbones --help   # a suite's options
"""
import argparse
import importlib
import json
import os
import os.path as osp
import sys

HERE = osp.dirname(osp.abspath(__file__))
sys.path.insert(0, HERE)
if not os.environ.get('PYTHONPATH'):  # this checkout's mmhybrid, not an installed one
    sys.path.insert(1, osp.dirname(osp.dirname(HERE)))

SUITES = {
    'backbones': 'backbones',
    'ops': 'ops',
    'attention': 'attention',
    'infvit': 'infvit',
    'sd': 'sd',
}


def parse_args(argv=None):
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument('--suite', choices=sorted(SUITES))
    known, _ = pre.parse_known_args(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument('--suite', choices=sorted(SUITES), required=True)
    import torch
    parser.add_argument('--device', default='cuda' if torch.cuda.is_available()
                        else 'cpu', choices=['cpu', 'cuda'])
    parser.add_argument('--threads', type=int, default=1,
                        help='CPU threads (run nothing else meanwhile)')
    parser.add_argument('--repeat', type=int, default=None,
                        help='timed calls after a warm-up; the minimum is '
                        'reported (default 3, or the suite\'s)')
    parser.add_argument('--malloc', choices=['default', 'tuned'], default=None,
                        help='glibc allocator: as it is, or MALLOC_MMAP_MAX_=0 and '
                        'a high MALLOC_TRIM_THRESHOLD_ (default: as this process '
                        'started)')
    parser.add_argument('--out', default=None,
                        help='folder of the CSV / PNG (work_dirs/benchmarks/SUITE)')
    parser.add_argument('--single', help=argparse.SUPPRESS)
    module = None
    if known.suite:
        module = importlib.import_module(SUITES[known.suite])
        module.add_arguments(parser.add_argument_group(f'suite {known.suite}'))
    args = parser.parse_args(argv)
    args.out = args.out or osp.join('work_dirs', 'benchmarks', args.suite)
    return args, module


def main(argv=None):
    args, module = parse_args(argv)
    from common import malloc_mode, reexec_with_malloc, setup_device
    if args.malloc is not None and args.single is None:
        reexec_with_malloc(args.malloc)
    args.malloc = malloc_mode()
    args.device_name = setup_device(args)
    if args.repeat is None:
        args.repeat = getattr(module, 'default_repeat', lambda args: 3)(args)
    if args.single is not None:
        print(json.dumps(module.single(json.loads(args.single), args)))
        return
    module.main(args)


if __name__ == '__main__':
    main()
