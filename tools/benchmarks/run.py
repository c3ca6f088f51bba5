"""One runner for every benchmark: ``run.py --suite NAME [options]``.

A suite is a module of this folder (``--suite NAME --help``: its options); each
prints a table and writes CSV and PNG under ``--out`` (docs/benchmarks.md)."""
import argparse
import importlib
import json
import os
import sys

SUITES = ('backbones', 'ops', 'attention', 'infvit', 'sd', 'deploy', 'linearize')


def suite_options():
    """The options of every suite, as ``--suite NAME --help`` lists them."""
    parts = []
    for name in SUITES:
        sub = argparse.ArgumentParser(add_help=False, usage=argparse.SUPPRESS)
        importlib.import_module(name).add_arguments(sub.add_argument_group(
            f'suite {name}'))
        parts.append(sub.format_help())
    return '\n'.join(parts)


def main(argv=None):
    import torch
    from tools.benchmarks.common import malloc_env, malloc_mode
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument('--suite', choices=SUITES)
    suite = pre.parse_known_args(argv)[0].suite
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--suite', choices=SUITES, required=True)
    p.add_argument('--device', choices=['cpu', 'cuda'],
                   default='cuda' if torch.cuda.is_available() else 'cpu')
    p.add_argument('--threads', type=int, default=1, help='CPU threads')
    p.add_argument('--repeat', type=int, help='timed calls after a warm-up (default 3)')
    p.add_argument('--dtype', help='default: the suite\'s for the device')
    p.add_argument('--malloc', choices=['default', 'tuned'],
                   help='glibc allocator setting (default: as this process started)')
    p.add_argument('--out', help='default: work_dirs/benchmarks/SUITE')
    p.add_argument('--single', help=argparse.SUPPRESS)  # one case, JSON in and out
    module = importlib.import_module(f'tools.benchmarks.{suite}') if suite else None
    if module:
        module.add_arguments(p.add_argument_group(f'suite {suite}'))
    else:  # --help without --suite: every suite's options too
        p.epilog = suite_options()
    args = p.parse_args(argv)
    if args.malloc not in (None, malloc_mode()) and args.single is None:
        # glibc reads its variables once, at start-up: restart with them
        os.execve(sys.executable, [sys.executable] + sys.argv, malloc_env(args.malloc))
    args.malloc, args.out = malloc_mode(), args.out or f'work_dirs/benchmarks/{suite}'
    args.repeat = getattr(module, 'REPEAT', 3) if args.repeat is None else args.repeat
    if args.device == 'cpu':
        torch.set_num_threads(args.threads)
        args.device_name = f'CPU ({os.cpu_count()} cores), {args.threads} thread(s)'
    else:
        args.device_name = torch.cuda.get_device_name()
    if args.single is not None:
        print(json.dumps(module.single(json.loads(args.single), args)))
    else:
        os.makedirs(args.out, exist_ok=True)
        module.main(args)


if __name__ == '__main__':
    main()
