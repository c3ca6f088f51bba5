"""What every suite shares: timing, peak memory, the allocator setting, cases in
child processes, tables, CSV and plots."""
import itertools
import json
import math
import os
import os.path as osp
import resource
import subprocess
import sys
import tempfile
import time

import torch

from tools.results import write_csv

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
# glibc page-faults in fresh mmaps for blocks above its mmap threshold (<= 32 MB) on
# every call; these keep freed memory in its heap (docs/benchmarks.md, "The allocator")
TUNED_MALLOC = {'MALLOC_MMAP_MAX_': '0', 'MALLOC_TRIM_THRESHOLD_': '100000000000'}


def malloc_env(mode, **extra):
    """This environment with glibc as it is (``'default'``) or ``'tuned'``."""
    env = {k: v for k, v in os.environ.items() if k not in TUNED_MALLOC}
    return dict(env, **(TUNED_MALLOC if mode == 'tuned' else {}), **extra)


def malloc_mode():
    """The allocator setting this process started with."""
    return 'tuned' if TUNED_MALLOC.items() <= os.environ.items() else 'default'


def torch_dtype(args, cuda='bfloat16'):
    """``--dtype`` (torch's name, fp32, fp16, bf16), or ``cuda`` / float32."""
    name = args.dtype or (cuda if args.device == 'cuda' else 'float32')
    return getattr(torch, dict(fp32='float32', fp16='float16', bf16='bfloat16').get(
        name, name))


def min_time(fn, repeat, device, warmup=1):
    """Minimum seconds of ``repeat`` calls of ``fn`` after ``warmup`` calls."""
    sync = torch.cuda.synchronize if device.startswith('cuda') else lambda: None
    for _ in range(warmup):
        fn()
    best = math.inf
    for _ in range(repeat):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


def peak_mib(fn, device):
    """Extra memory at the peak of one call: max allocated on CUDA, the running
    sum of the allocations the profiler records on the CPU."""
    if device.startswith('cuda'):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    from torch.profiler import ProfilerActivity, profile
    sys.stderr.flush()  # silence fd 2: the profiler's C++ side logs past sys.stderr
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            fn()
        events = sorted((e for e in prof.profiler.kineto_results.events()
                         if e.name() == '[memory]'), key=lambda e: e.start_ns())
    except Exception:  # profiler internals differ across torch versions
        return math.nan
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)
    return max(itertools.accumulate(e.nbytes() for e in events), default=0) / 2**20


def process_peak_mib(device):
    """This process's peak: max allocated on CUDA, peak RSS on the CPU."""
    if device.startswith('cuda'):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def fwd_bwd(fn, inputs, params, args):
    """Forward (no grad) and forward + backward (random output gradients, every
    input and parameter gets one) ms, and the peak MiB of one forward + backward."""
    grads, forward = [], torch.no_grad()(lambda: fn(*inputs))

    def forward_backward():
        outs = fn(*inputs)
        outs = [outs] if torch.is_tensor(outs) else list(outs)
        grads[:] = grads or [torch.randn_like(o) for o in outs]
        torch.autograd.backward(outs, grads)
        for t in list(inputs) + list(params):
            t.grad = None

    row = dict(fwd_ms=1e3 * min_time(forward, args.repeat, args.device))
    if not getattr(args, 'no_backward', False):
        row.update(fwd_bwd_ms=1e3 * min_time(forward_backward, args.repeat, args.device),
                   peak_mib=peak_mib(forward_backward, args.device))
    return row


def _peak_rss_mib(pid):
    """The high-water mark of a live process's resident memory (``VmHWM``)."""
    try:
        with open(f'/proc/{pid}/status') as f:
            return int(next(ln for ln in f if ln.startswith('VmHWM')).split()[1]) / 1024
    except (OSError, StopIteration):  # it ended, or no /proc here
        return 0.


def run_child(case, time_cap=None, env=None, watch_peak=False):
    """``case`` (a JSON-able dict) in a fresh process with this one's options: its
    own peak memory, and an OOM or a run past ``time_cap`` s is a status, not a
    crash. ``env`` defaults to this one with this checkout first on ``PYTHONPATH``.
    ``watch_peak``: a case that did not finish gets the peak RSS it had reached."""
    env = env or dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (ROOT, os.environ.get('PYTHONPATH')) if p))
    cmd = [sys.executable, osp.join(ROOT, 'tools', 'benchmarks', 'run.py'),
           *sys.argv[1:], '--single', json.dumps(case)]
    with tempfile.TemporaryFile('w+') as out, tempfile.TemporaryFile('w+') as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=env)
        start, peak = time.perf_counter(), 0.
        while proc.poll() is None and (time_cap is None
                                       or time.perf_counter() - start < time_cap):
            if watch_peak:
                peak = max(peak, _peak_rss_mib(proc.pid))
            time.sleep(0.1)
        failed = dict(peak_mib=peak) if watch_peak else {}
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            return dict(failed, status=f'too slow (>{time_cap:g} s)')
        out.seek(0)
        err.seek(0)
        lines = [ln for ln in out.read().splitlines() if ln.startswith('{')]
        if proc.returncode or not lines:
            stderr = err.read()
            print(f'  {case}: {(stderr.strip() or "no output").splitlines()[-1][:160]}')
            oom = 'out of memory' in stderr.lower() or proc.returncode in (-9, 137)
            return dict(failed, status='OOM' if oom else 'failed')
    return dict(json.loads(lines[-1]), status='ok')


def report(args, stem, title, rows, columns, x=None, ys=None, series=None):
    """Print the table of ``rows`` (``columns``: (header, key, format)) under ``title``
    with the device, torch version and the machine's load (1-minute load average,
    our own threads included) added, write ``stem.csv`` and plot ``ys`` against
    ``x``, a line per ``series(row)``."""
    title = (f'{title}, {args.device_name}; torch {torch.__version__}; '
             f'load average {os.getloadavg()[0]:.1f}')
    cells = [[c[0] for c in columns], ['---'] * len(columns)] + [
        ['-' if r.get(k) is None or r[k] != r[k] else format(r[k], f)
         for _, k, f in columns] for r in rows]
    table = '\n'.join('| ' + ' | '.join(c) + ' |' for c in cells)
    print(f'\n{title}\n{table}')
    path = osp.join(args.out, stem)
    write_csv(rows, path + '.csv', list(dict.fromkeys(k for r in rows for k in r)))
    if not ys:
        print(f'wrote {path}.csv')
        return
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(ys), figsize=(5.5 * len(ys), 4), squeeze=False)
    for ax, (key, label) in zip(axes[0], ys.items()):
        lines = {}
        for r in rows:
            if isinstance(r.get(key), float) and r[key] == r[key]:
                lines.setdefault(series(r), []).append((r[x], r[key]))
        for name, points in lines.items():
            ax.loglog(*zip(*sorted(points)), marker='o', label=name)
        ax.set(xlabel=x, ylabel=label)
        ax.grid(True, which='both', alpha=0.3)
        if lines:
            ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path + '.png', dpi=120)
    plt.close(fig)
    print(f'wrote {path}.csv and {path}.png')
