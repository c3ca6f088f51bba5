"""Time, peak memory and bandwidth of the token-mixing kernels versus sequence length.

Ops on one (B, N, C) sequence (heads of C / H channels for the attention ops):

* ``wkv-<backend>``: bidirectional WKV (SoLA Eq. 9, ``mmhybrid.ops.bi_wkv``) for each
  name in ``--wkv-backends`` (``triton``, ``torch`` = the chunk path, ``naive``);
* ``sdpa``: global softmax attention, ``F.scaled_dot_product_attention``
  (FlashAttention on GPU for fp16/bf16);
* ``infsa-<backend>``: Linear InfSA (``mmhybrid.ops.linear_infsa``) for each name in
  ``--infsa-backends`` (``default`` = no ``backend=`` argument);
* ``effatt``: ELFATT's global head (EFFATT); ``elfatt``: ELFATT's two heads, half of
  the heads EFFATT and half blockify softmax attention on ``--block-size`` tokens;
* ``linear``: one C x C ``nn.Linear`` on the same (B, N, C) input, the yardstick: every
  op is also reported as a ratio to it, measured in the same run.

Forward and forward+backward (gradients for every input, and for WKV's w, u) are
timed as the minimum over ``--repeat`` runs after a warm-up. Peak memory is the extra
memory of one forward+backward: ``torch.cuda.max_memory_allocated`` on GPU, the
allocations recorded by the profiler on CPU. On GPU the script also measures the
device-to-device copy bandwidth (a 1 GiB copy) and reports each op's effective
bandwidth, (inputs read + outputs written, once each) / time, as a fraction of it;
for WKV forward that is k, v and y, for forward+backward also g, y, dk, dv.
Backends that are not installed or not usable on the device are skipped with a note.

On CPU run one thread per process and nothing else (``OMP_NUM_THREADS=1``); the
default CPU range is 1k..64k tokens, ``sdpa`` and ``naive`` stop at
``--max-quadratic-tokens``. Writes ``kernels.csv`` and ``kernels.png`` to ``--out``:

    OMP_NUM_THREADS=1 python tools/benchmark_kernels.py --device cpu
    python tools/benchmark_kernels.py --device cuda --dtype bfloat16
"""
import argparse
import contextlib
import importlib.util
import inspect
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

from mmhybrid.ops import block_attention, effatt, linear_infsa
from mmhybrid.ops.wkv import BACKENDS as WKV_BACKENDS, bi_wkv
from mmhybrid.utils.results import write_csv


def synchronize(device):
    if device == 'cuda':
        torch.cuda.synchronize()


def min_time(fn, repeat, device):
    fn()  # warm-up: kernel selection, compilation, allocator
    synchronize(device)
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best


@contextlib.contextmanager
def stderr_to_devnull():
    """Point file descriptor 2 at /dev/null: the profiler's C++ side logs a few
    lines per run (profiler start/stop, no GPU) past Python's ``sys.stderr``."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, 'w') as null:
        os.dup2(null.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def cpu_peak_bytes(fn):
    """Peak of the running sum of CPU allocations recorded by the profiler."""
    from torch.profiler import ProfilerActivity, profile
    with stderr_to_devnull(), profile(activities=[ProfilerActivity.CPU],
                                      profile_memory=True) as prof:
        fn()
    events = [e for e in prof.profiler.kineto_results.events()
              if e.name() == '[memory]']
    current = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        current += event.nbytes()
        peak = max(peak, current)
    return peak


def peak_bytes(fn, device):
    if device != 'cuda':
        try:
            return cpu_peak_bytes(fn)
        except Exception:  # profiler internals differ across torch versions
            return math.nan
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def copy_bandwidth(device):
    """Device-to-device copy bandwidth in bytes/s (read + write of a 1 GiB tensor)."""
    src = torch.empty(2**28, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    seconds = min_time(lambda: dst.copy_(src), 5, device)
    return 2 * src.numel() * src.element_size() / seconds


class Case:
    """One op at one size: ``forward(*inputs)``, its inputs, and its memory traffic
    in units of one (B, N, C) tensor (forward, forward+backward)."""

    def __init__(self, name, forward, inputs, params=(), io=(3, 9)):
        self.name, self.forward, self.inputs, self.params, self.io = (
            name, forward, inputs, tuple(params), io)
        self.grad = None  # made by the warm-up run, outside the measured ones

    def run_forward(self):
        with torch.no_grad():
            self.forward(*self.inputs)

    def run_forward_backward(self):
        out = self.forward(*self.inputs)
        if self.grad is None:
            self.grad = torch.ones_like(out)
        out.backward(self.grad)
        for t in self.inputs + list(self.params):
            t.grad = None


def wkv_backend_available(name, device):
    if name not in WKV_BACKENDS:
        return 'no such backend'
    if name == 'triton' and importlib.util.find_spec('triton') is None:
        return 'triton not installed'
    if name == 'triton' and device != 'cuda':
        from mmhybrid.ops.wkv import fused
        if not fused.INTERPRETED:
            return 'needs CUDA'
    return None


def infsa_call(name):
    """``linear_infsa`` with ``backend=name``, or None when it cannot take it."""
    takes_backend = 'backend' in inspect.signature(linear_infsa).parameters
    if name == 'default':
        return linear_infsa
    if not takes_backend:
        return None
    return lambda q, k, v: linear_infsa(q, k, v, backend=name)


def build_cases(args, N, dtype):
    B, C, H, dev = args.batch, args.channels, args.heads, args.device

    def seq(*shape):
        return torch.randn(*shape, device=dev, dtype=dtype).requires_grad_()

    cases, skipped = [], []
    layer = torch.nn.Linear(C, C, device=dev, dtype=dtype)
    cases.append(Case('linear', layer, [seq(B, N, C)], layer.parameters(), io=(2, 5)))
    quadratic_ok = N <= args.max_quadratic_tokens
    for name in args.wkv_backends:
        reason = wkv_backend_available(name, dev)
        if name == 'naive' and not quadratic_ok:
            reason = 'O(N^2), above --max-quadratic-tokens'
        if reason:
            skipped.append((f'wkv-{name}', reason))
            continue
        w = ((torch.rand(C, device=dev) * 8 - 5) / N).requires_grad_()
        u = torch.full((C, ), -1.2 / N, device=dev).requires_grad_()
        cases.append(Case(f'wkv-{name}',
                          lambda k, v, name=name, w=w, u=u: bi_wkv(w, u, k, v, name),
                          [seq(B, N, C), seq(B, N, C)], (w, u)))

    def heads():
        return [seq(B, H, N, C // H) for _ in range(3)]

    if 'sdpa' in args.ops:
        if quadratic_ok:
            cases.append(Case('sdpa', F.scaled_dot_product_attention, heads(),
                              io=(4, 11)))
        else:
            skipped.append(('sdpa', 'O(N^2), above --max-quadratic-tokens'))
    if 'infsa' in args.ops:
        for name in args.infsa_backends:
            fn = infsa_call(name)
            if fn is None:
                skipped.append((f'infsa-{name}', 'linear_infsa takes no backend='))
                continue
            try:
                probe = [torch.randn(1, 1, 8, 4, device=dev, dtype=dtype)] * 3
                fn(*probe)
            except Exception as e:  # unknown name, missing kernel, wrong device
                skipped.append((f'infsa-{name}', f'{type(e).__name__}: {e}'))
                continue
            cases.append(Case(f'infsa-{name}', fn, heads(), io=(4, 11)))
    if 'effatt' in args.ops:
        cases.append(Case('effatt', effatt, heads(), io=(4, 11)))
    if 'elfatt' in args.ops:
        half = max(H // 2, 1)

        def elfatt(q, k, v):
            glob = effatt(q[:, :half], k[:, :half], v[:, :half])
            local = block_attention(q[:, half:], k[:, half:], v[:, half:],
                                    args.block_size)
            return torch.cat((glob, local), dim=1)

        cases.append(Case('elfatt', elfatt, heads(), io=(4, 11)))
    return cases, skipped


def measure(case, args, unit_bytes, bandwidth):
    fwd = min_time(case.run_forward, args.repeat, args.device)
    fwd_bwd = min_time(case.run_forward_backward, args.repeat, args.device)
    peak = peak_bytes(case.run_forward_backward, args.device)
    row = dict(op=case.name, fwd_ms=1e3 * fwd, fwd_bwd_ms=1e3 * fwd_bwd,
               peak_mib=peak / 2**20, peak_x_input=peak / unit_bytes)
    if bandwidth:
        row['fwd_bw_frac'] = case.io[0] * unit_bytes / fwd / bandwidth
        row['fwd_bwd_bw_frac'] = case.io[1] * unit_bytes / fwd_bwd / bandwidth
    return row


def plot(rows, args, path):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for op in dict.fromkeys(r['op'] for r in rows):
        pts = [(r['tokens'], r['fwd_bwd_ms'], r['peak_mib']) for r in rows
               if r['op'] == op]
        tokens, ms, mib = zip(*pts)
        axes[0].loglog(tokens, ms, marker='o', label=op)
        axes[1].loglog(tokens, mib, marker='o', label=op)
    axes[0].set_ylabel('forward + backward (ms)')
    axes[1].set_ylabel('peak memory, forward + backward (MiB)')
    for ax in axes:
        ax.set_xlabel('tokens N')
        ax.grid(True, which='both', alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f'B={args.batch} C={args.channels} {args.dtype} on {args.device_name}')
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--device', default='cuda' if torch.cuda.is_available()
                        else 'cpu')
    parser.add_argument('--dtype', default=None,
                        help='default: bfloat16 on cuda, float32 on cpu')
    parser.add_argument('--tokens', type=int, nargs='+', default=None,
                        help='default: 1k..1M (cuda), 1k..64k (cpu), x4 steps')
    parser.add_argument('--repeat', type=int, default=5)
    parser.add_argument('--batch', type=int, default=1)
    parser.add_argument('--channels', type=int, default=96,
                        help='SoLA-T / Swin-T stage-1 width')
    parser.add_argument('--heads', type=int, default=3)
    parser.add_argument('--block-size', type=int, default=49)
    parser.add_argument('--ops', nargs='+',
                        default=['wkv', 'sdpa', 'infsa', 'effatt', 'elfatt'])
    parser.add_argument('--wkv-backends', nargs='+', default=['triton', 'torch'])
    parser.add_argument('--infsa-backends', nargs='+', default=['default', 'triton'])
    parser.add_argument('--max-quadratic-tokens', type=int, default=None,
                        help='largest N for O(N^2) ops (default 1M cuda, 16k cpu)')
    parser.add_argument('--out', default='work_dirs/benchmark_kernels')
    args = parser.parse_args()
    cuda = args.device.startswith('cuda')
    args.device = 'cuda' if cuda else args.device
    args.dtype = args.dtype or ('bfloat16' if cuda else 'float32')
    dtype = getattr(torch, args.dtype)
    args.tokens = args.tokens or [1024 * 4**i for i in range(6 if cuda else 4)]
    args.max_quadratic_tokens = args.max_quadratic_tokens or (2**20 if cuda else 2**14)
    if 'wkv' not in args.ops:
        args.wkv_backends = []
    args.device_name = (torch.cuda.get_device_name() if cuda else
                        f'cpu ({torch.get_num_threads()} threads)')
    os.makedirs(args.out, exist_ok=True)

    bandwidth = copy_bandwidth(args.device) if cuda else None
    print(f'{args.device_name}, torch {torch.__version__}, {args.dtype}, '
          f'B={args.batch} C={args.channels} heads={args.heads}' +
          (f', copy bandwidth {bandwidth / 1e9:.0f} GB/s' if bandwidth else ''))
    rows, notes = [], {}
    for N in args.tokens:
        unit = args.batch * N * args.channels * dtype.itemsize
        cases, skipped = build_cases(args, N, dtype)
        notes.update(skipped)
        results = [measure(case, args, unit, bandwidth) for case in cases]
        linear = next(r for r in results if r['op'] == 'linear')
        for r in results:
            r.update(tokens=N, x_linear=r['fwd_bwd_ms'] / linear['fwd_bwd_ms'])
            rows.append(r)
        del cases

    header = (f'{"op":14} {"tokens":>8} {"fwd ms":>9} {"fwd+bwd ms":>11} '
              f'{"x linear":>9} {"peak MiB":>9} {"x input":>8}')
    if bandwidth:
        header += f' {"fwd bw":>7} {"f+b bw":>7}'
    print(header)
    for r in rows:
        line = (f'{r["op"]:14} {r["tokens"]:8d} {r["fwd_ms"]:9.2f} '
                f'{r["fwd_bwd_ms"]:11.2f} {r["x_linear"]:9.2f} {r["peak_mib"]:9.1f} '
                f'{r["peak_x_input"]:8.1f}')
        if bandwidth:
            line += f' {r["fwd_bw_frac"]:7.0%} {r["fwd_bwd_bw_frac"]:7.0%}'
        print(line)
    for name, reason in notes.items():
        print(f'skipped {name}: {reason}')
    fields = ['op', 'tokens', 'fwd_ms', 'fwd_bwd_ms', 'x_linear', 'peak_mib',
              'peak_x_input'] + (['fwd_bw_frac', 'fwd_bwd_bw_frac'] if bandwidth else [])
    write_csv(rows, os.path.join(args.out, 'kernels.csv'), fields)
    plot(rows, args, os.path.join(args.out, 'kernels.png'))
    print(f'wrote {args.out}/kernels.csv and kernels.png')


if __name__ == '__main__':
    main()
