"""What every benchmark suite shares: timing, peak memory, child processes for
isolated cases, the allocator setting, tables, CSV and plots."""
import contextlib
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

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
RUN = osp.join(osp.dirname(osp.abspath(__file__)), 'run.py')

# glibc serves blocks above its mmap threshold (<= 32 MB) with fresh mmaps, which
# are page-faulted in at a fraction of memory bandwidth on every call; these keep
# freed memory in the heap instead (docs/benchmarks.md, "Allocator")
TUNED_MALLOC = {'MALLOC_MMAP_MAX_': '0', 'MALLOC_TRIM_THRESHOLD_': '100000000000'}


def malloc_env(mode):
    """Environment for a child process: ``'default'`` leaves glibc alone,
    ``'tuned'`` adds :data:`TUNED_MALLOC`."""
    env = {k: v for k, v in os.environ.items() if k not in TUNED_MALLOC}
    if mode == 'tuned':
        env.update(TUNED_MALLOC)
    return env


def malloc_mode():
    """The allocator setting this process started with."""
    return 'tuned' if all(os.environ.get(k) == v for k, v in
                          TUNED_MALLOC.items()) else 'default'


def reexec_with_malloc(mode):
    """Restart this process with the allocator setting ``mode`` unless it has it
    (glibc reads the variables once, at start-up)."""
    if mode != malloc_mode():
        os.execve(sys.executable, [sys.executable] + sys.argv, malloc_env(mode))


def setup_device(args):
    """Thread count on the CPU; the device's name for titles."""
    if args.device == 'cpu':
        torch.set_num_threads(args.threads)
        return f'CPU ({os.cpu_count()} cores), {args.threads} thread(s)'
    return torch.cuda.get_device_name()


def sync(device):
    if device.startswith('cuda'):
        torch.cuda.synchronize()


def min_time(fn, repeat, device, warmup=1):
    """Minimum seconds of ``repeat`` calls of ``fn`` after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    sync(device)
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        sync(device)
        best = min(best, time.perf_counter() - start)
    return best


@contextlib.contextmanager
def _stderr_to_devnull():
    """Silence file descriptor 2: the profiler's C++ side logs past sys.stderr."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, 'w') as null:
        os.dup2(null.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_mib(fn, device):
    """Extra memory at the peak of one call of ``fn``: max allocated on CUDA, the
    running sum of the allocations the profiler records on the CPU."""
    if device.startswith('cuda'):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    from torch.profiler import ProfilerActivity, profile
    try:
        with _stderr_to_devnull(), profile(activities=[ProfilerActivity.CPU],
                                           profile_memory=True) as prof:
            fn()
    except Exception:  # profiler internals differ across torch versions
        return math.nan
    events = sorted((e for e in prof.profiler.kineto_results.events()
                     if e.name() == '[memory]'), key=lambda e: e.start_ns())
    current = peak = 0
    for event in events:
        current += event.nbytes()
        peak = max(peak, current)
    return peak / 2**20


def process_peak_mib(device):
    """This process's peak: max allocated on CUDA, peak RSS on the CPU."""
    if device.startswith('cuda'):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_child(suite, case, argv, time_cap=None, env=None):
    """Run ``case`` (a JSON-able dict) of ``suite`` in a fresh process (its own
    peak memory; an OOM or a run past ``time_cap`` seconds is a status, not a
    crash). ``argv`` are the suite's options; ``env`` the child's whole
    environment (default: this one, this checkout first on ``PYTHONPATH``).
    Returns the child's result dict."""
    cmd = [sys.executable, RUN, '--suite', suite, '--single', json.dumps(case)]
    if env is None:  # this checkout's mmhybrid first
        env = dict(os.environ)
        env['PYTHONPATH'] = os.pathsep.join(
            p for p in (ROOT, env.get('PYTHONPATH')) if p)
    try:
        proc = subprocess.run(cmd + list(argv), capture_output=True, text=True,
                              env=env, timeout=time_cap)
    except subprocess.TimeoutExpired:
        return dict(status=f'too slow (>{time_cap:g} s)')
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith('{')]
    if proc.returncode or not lines:
        err = (proc.stderr.strip().splitlines() or ['no output'])[-1]
        oom = 'out of memory' in proc.stderr.lower() or proc.returncode in (-9, 137)
        print(f'  {case}: {err[:160]}', flush=True)
        return dict(status='OOM' if oom else 'failed')
    return dict(json.loads(lines[-1]), status='ok')


def scaling_exponent(points):
    """Least-squares slope of log(y) against log(x) over (x, y) pairs (None
    below two points)."""
    points = [(math.log(x), math.log(y)) for x, y in points if y]
    if len(points) < 2:
        return None
    mx = sum(p[0] for p in points) / len(points)
    my = sum(p[1] for p in points) / len(points)
    sxx = sum((p[0] - mx)**2 for p in points)
    return sum((p[0] - mx) * (p[1] - my) for p in points) / sxx


def fmt(value, spec='.2f'):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return '-' if value != value else format(value, spec)
    return '-' if value is None else str(value)


def markdown_table(rows, columns):
    """``columns``: (header, key, format spec) triples."""
    lines = ['| ' + ' | '.join(c[0] for c in columns) + ' |',
             '|' + '---|' * len(columns)]
    for r in rows:
        lines.append('| ' + ' | '.join(fmt(r.get(key), spec)
                                       for _, key, spec in columns) + ' |')
    return '\n'.join(lines)


def save(rows, out, stem, fields=None):
    """CSV of ``rows`` at ``out/stem.csv``; returns the path stem."""
    path = osp.join(out, stem)
    write_csv(rows, path + '.csv', fields)
    return path


def plot(panels, path, title=''):
    """Log-log line plots. ``panels``: list of (xlabel, ylabel, {series: [(x, y)]})."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4),
                             squeeze=False)
    for ax, (xlabel, ylabel, series) in zip(axes[0], panels):
        for name, points in series.items():
            points = [(x, y) for x, y in points if y == y and y is not None]
            if points:
                ax.loglog(*zip(*points), marker='o', label=name)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, which='both', alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
