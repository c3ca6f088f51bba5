"""Every token-mixing op against a C x C linear layer at the stage shapes of the
backbone that uses it, forward and forward + backward.

Per op, backend and stage of a ``--size`` x ``--size`` input: ms, the op's own
multiply-adds (the method's formula for ops whose kernels hide their arithmetic,
:mod:`mmhybrid.analysis.formulas`; counted matmuls for the others), GMAC/s, and
time and GMAC/s as ratios to one ``nn.Linear(C, C)`` on the stage's (B, N, C)
input in the same run; peak memory of one forward + backward. Forward + backward
is counted as three times the forward's multiply-adds (the usual convention, for
the op and the linear layer alike). The gated delta
rule runs on 2B sequences (both scans of a 'G' layer). Shapes:

* ``wkv`` (SoLA-T), ``gdn`` and ``swa`` (InfiniteVL-T, 7x7 windows): stages 1-4,
  widths 96/128/192/256, heads of 32 channels;
* ``effatt``, ``elfatt`` (ELFATT's two heads, blocks of 49) and ``sdpa`` (global
  softmax attention): Swin-T, widths 96-768, heads of 32;
* ``infsa`` (Linear InfViT-4L: 1024 channels, 64 heads, tokens of 16 pixels);
* ``historical`` (HAViT-DeiT-T: 192 channels, 3 heads, tokens of 16 pixels).

``--naive`` adds the reference backends (and ``sdpa`` runs) up to
``--max-quadratic-tokens``.
"""
import os

import torch
import torch.nn.functional as F

from common import fmt, markdown_table, min_time, peak_mib, plot, save

# (channels, heads, downsampling) per stage of the backbone each op serves
PYRAMID_T = [(96, 3, 4), (128, 4, 8), (192, 6, 16), (256, 8, 32)]
SWIN_T = [(96, 3, 4), (192, 6, 8), (384, 12, 16), (768, 24, 32)]
SHAPES = {'wkv': PYRAMID_T, 'gdn': PYRAMID_T, 'swa': PYRAMID_T,
          'effatt': SWIN_T, 'elfatt': SWIN_T, 'sdpa': SWIN_T,
          'infsa': [(1024, 64, 16)], 'historical': [(192, 3, 16)]}
QUADRATIC = ('sdpa', 'historical')
# memory traffic of (forward, forward + backward) in (B, N, C) tensors: inputs
# read and outputs written once each (GPU: reported against copy bandwidth)
IO = {'linear': (2, 5), 'wkv': (3, 9), 'gdn': (8, 22)}
IO_ATTENTION = (4, 11)


def add_arguments(parser):
    parser.add_argument('--ops', nargs='+', default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument('--size', type=int, default=1024,
                        help='input image side whose stage shapes are measured')
    parser.add_argument('--stages', type=int, nargs='+', default=[1, 2, 3, 4])
    parser.add_argument('--batch', type=int, default=1, help='images')
    parser.add_argument('--dtype', default=None,
                        help='default: bfloat16 on cuda, float32 on cpu')
    parser.add_argument('--naive', action='store_true',
                        help='also the naive reference backends')
    parser.add_argument('--no-backward', action='store_true',
                        help='forward only')
    parser.add_argument('--max-quadratic-tokens', type=int, default=16384,
                        help='largest N for O(N^2) ops and naive backends')


def backends(op, device, naive):
    """Backend names to measure (None: the op's own choice)."""
    extra = {'wkv': ['naive'], 'gdn': ['naive'], 'swa': ['naive'],
             'historical': ['naive']}.get(op, [])
    names = [None]
    if op in ('wkv', 'gdn', 'effatt', 'infsa') and device == 'cuda':
        names.append('torch')  # the default there is Triton / fla when installed
    return names + (extra if naive else [])


def make_case(op, backend, B, N, hw, C, heads, device, dtype):
    """(function of the tensors, tensors, parameters with gradients, MACs)."""
    from mmhybrid.analysis import (delta_rule_macs, historical_attention_macs,
                                   sliding_window_macs, wkv_macs)
    from mmhybrid.ops import (bi_wkv, block_attention, effatt, gated_delta_rule,
                              historical_attention, linear_infsa,
                              sliding_window_attention)
    d = C // heads

    def rand(*shape):
        return torch.randn(*shape, device=device, dtype=dtype).requires_grad_()

    def attn():
        return [rand(B, heads, N, d) for _ in range(3)]

    kw = {} if backend is None else {'backend': backend}
    if op == 'wkv':
        w = ((torch.rand(C, device=device) * 8 - 5) / N).requires_grad_()
        u = torch.full((C, ), -1.2 / N, device=device).requires_grad_()
        return (lambda k, v: bi_wkv(w, u, k, v, **kw), [rand(B, N, C), rand(B, N, C)],
                [w, u], wkv_macs(B, N, C))
    if op == 'gdn':
        q, k, v = (rand(2 * B, N, heads, d) for _ in range(3))
        g = (-0.1 * torch.rand(2 * B, N, heads, device=device)).requires_grad_()
        beta = torch.rand(2 * B, N, heads, device=device, dtype=dtype).requires_grad_()
        return (lambda *t: gated_delta_rule(*t, use_qk_l2norm_in_kernel=True,
                                            **kw)[0],
                [q, k, v, g, beta], [], delta_rule_macs(2 * B, N, heads, d, d))
    if op == 'swa':
        return (lambda *t: sliding_window_attention(*t, hw, 7, **kw), attn(), [],
                sliding_window_macs(B, heads, hw, (7, 7), d, d))
    if op == 'historical':
        history = torch.randn(B, heads, N, N, device=device).requires_grad_()
        macs = historical_attention_macs(B, heads, N, d, d)
        # the new history is an output too, as for a layer inside a chain
        return (lambda q, k, v: historical_attention(q, k, v, history, **kw),
                attn(), [history], sum(macs.values()))
    half = max(heads // 2, 1)

    def elfatt(q, k, v):  # Eq. 8: half the heads EFFATT, half block softmax
        return torch.cat((effatt(q[:, :half], k[:, :half], v[:, :half]),
                          block_attention(q[:, half:], k[:, half:], v[:, half:],
                                          49)), 1)

    fn = {'effatt': lambda *t: effatt(*t, **kw), 'elfatt': elfatt,
          'sdpa': F.scaled_dot_product_attention,
          'infsa': lambda *t: linear_infsa(*t, **kw)}[op]
    return fn, attn(), [], None  # MACs counted from the matmuls


def counted_macs(fn, tensors):
    """Multiply-adds of one call as the FLOP counter sees them (matmuls, SDPA)."""
    from mmhybrid.analysis import FlopCounter

    class Op(torch.nn.Module):
        def forward(self, *t):
            return fn(*t)

    op = Op()
    with FlopCounter(op) as counter, torch.no_grad():
        op(*tensors)
    return counter.result.total()


def copy_bandwidth(device):
    """Device-to-device copy bandwidth in bytes/s (read + write of 1 GiB)."""
    src = torch.empty(2**28, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    return 2 * src.nbytes / min_time(lambda: dst.copy_(src), 5, device)


def measure(fn, tensors, params, args):
    def forward():
        with torch.no_grad():
            fn(*tensors)

    grad = []

    def forward_backward():
        outs = fn(*tensors)
        outs = [outs] if torch.is_tensor(outs) else list(outs)
        if not grad:
            grad.extend(torch.randn_like(o) for o in outs)
        torch.autograd.backward(outs, grad)
        for t in list(tensors) + list(params):
            t.grad = None

    row = dict(fwd_ms=1e3 * min_time(forward, args.repeat, args.device))
    if not args.no_backward:
        row['fwd_bwd_ms'] = 1e3 * min_time(forward_backward, args.repeat,
                                           args.device)
        row['peak_mib'] = peak_mib(forward_backward, args.device)
    return row


def add_traffic(row, io, unit_bytes, bandwidth):
    """Peak over one (B, N, C) input; on GPU the effective bandwidth (traffic
    ``io`` over time) as a fraction of the copy bandwidth."""
    if row.get('peak_mib') is not None:
        row['peak_x_input'] = row['peak_mib'] * 2**20 / unit_bytes
    if bandwidth:
        for phase, units in zip(('fwd', 'fwd_bwd'), io):
            if f'{phase}_ms' in row:
                row[f'{phase}_bw_frac'] = (units * unit_bytes / bandwidth /
                                           (row[f'{phase}_ms'] / 1e3))


def main(args):
    cuda = args.device == 'cuda'
    args.dtype = args.dtype or ('bfloat16' if cuda else 'float32')
    dtype = getattr(torch, args.dtype)
    rows, skipped, linear_shapes = [], {}, set()
    bandwidth = copy_bandwidth(args.device) if cuda else None
    if bandwidth:
        print(f'copy bandwidth {bandwidth / 1e9:.0f} GB/s')
    for op in args.ops:
        for stage in args.stages:
            if stage > len(SHAPES[op]):
                continue
            C, heads, down = SHAPES[op][stage - 1]
            hw = (-(-args.size // down), ) * 2
            N, B = hw[0] * hw[1], args.batch
            layer = torch.nn.Linear(C, C, device=args.device, dtype=dtype)
            x = torch.randn(B, N, C, device=args.device, dtype=dtype,
                            requires_grad=True)
            linear = measure(layer, [x], list(layer.parameters()), args)
            linear_gmacs = B * N * C * C / 1e9
            for backend in backends(op, args.device, args.naive):
                name = f'{op}' + (f'-{backend}' if backend else '')
                if (op in QUADRATIC or backend == 'naive') and \
                        N > args.max_quadratic_tokens:
                    skipped[name] = f'O(N^2) above {args.max_quadratic_tokens} tokens'
                    continue
                try:
                    fn, tensors, params, macs = make_case(
                        op, backend, B, N, hw, C, heads, args.device, dtype)
                    macs = macs or counted_macs(fn, tensors)
                    row = measure(fn, tensors, params, args)
                except (ImportError, ValueError, RuntimeError) as e:
                    skipped[name] = f'{type(e).__name__}: {str(e)[:100]}'
                    continue
                row.update(op=name, stage=stage, tokens=N, channels=C, heads=heads,
                           gmacs=macs / 1e9)
                add_traffic(row, IO.get(op, IO_ATTENTION), B * N * C * dtype.itemsize,
                            bandwidth)
                for phase, passes in (('fwd', 1), ('fwd_bwd', 3)):
                    if f'{phase}_ms' in row:
                        rate = passes * macs / 1e9 / row[f'{phase}_ms'] * 1e3
                        lin_rate = passes * linear_gmacs / linear[f'{phase}_ms'] * 1e3
                        row[f'{phase}_gmac_s'] = rate
                        row[f'{phase}_x_linear_time'] = (row[f'{phase}_ms'] /
                                                         linear[f'{phase}_ms'])
                        row[f'{phase}_x_linear_rate'] = rate / lin_rate
                rows.append(row)
                print(f"  {name} stage {stage} N={N}: fwd {row['fwd_ms']:.2f} ms "
                      f"({row['fwd_x_linear_time']:.1f}x linear)", flush=True)
            if (N, C) in linear_shapes:
                continue
            linear_shapes.add((N, C))
            add_traffic(linear, IO['linear'], B * N * C * dtype.itemsize, bandwidth)
            rows.append(dict(linear, op='linear', stage=stage, tokens=N, channels=C,
                             heads=1, gmacs=linear_gmacs,
                             **{f'{p}_gmac_s': n * linear_gmacs / linear[f'{p}_ms'] * 1e3
                                for p, n in (('fwd', 1), ('fwd_bwd', 3))
                                if f'{p}_ms' in linear}))
    title = (f'ops at the stage shapes of a {args.size}^2 input, batch {args.batch}, '
             f'{args.dtype}, {args.device_name}, malloc {args.malloc}; '
             f'torch {torch.__version__}')
    print('\n' + title)
    columns = [('op', 'op', ''), ('stage', 'stage', 'd'), ('N', 'tokens', 'd'),
               ('C', 'channels', 'd'), ('GMACs', 'gmacs', '.3f'),
               ('fwd ms', 'fwd_ms', '.2f'), ('fwd GMAC/s', 'fwd_gmac_s', '.1f'),
               ('fwd x linear time', 'fwd_x_linear_time', '.2f'),
               ('fwd GMAC/s / linear\'s', 'fwd_x_linear_rate', '.2f')]
    if not args.no_backward:
        columns += [('f+b ms', 'fwd_bwd_ms', '.2f'),
                    ('f+b GMAC/s', 'fwd_bwd_gmac_s', '.1f'),
                    ('f+b x linear time', 'fwd_bwd_x_linear_time', '.2f'),
                    ('f+b GMAC/s / linear\'s', 'fwd_bwd_x_linear_rate', '.2f'),
                    ('f+b peak MiB', 'peak_mib', '.1f'),
                    ('peak x input', 'peak_x_input', '.1f')]
    if bandwidth:
        columns += [('fwd bw', 'fwd_bw_frac', '.0%'),
                    ('f+b bw', 'fwd_bwd_bw_frac', '.0%')]
    print(markdown_table(rows, columns))
    for name, reason in skipped.items():
        print(f'skipped {name}: {reason}')
    os.makedirs(args.out, exist_ok=True)
    stem = save(rows, args.out, f'ops_{args.device}',
                ['op', 'stage', 'tokens', 'channels', 'heads', 'gmacs'] +
                [c[1] for c in columns[5:]])
    key = 'fwd_ms' if args.no_backward else 'fwd_bwd_ms'
    series_t, series_r = {}, {}
    for r in rows:
        series_t.setdefault(r['op'], []).append((r['tokens'], r[key]))
        series_r.setdefault(r['op'], []).append((r['tokens'], r.get(
            key.replace('_ms', '_gmac_s'))))
    phase = 'forward' if args.no_backward else 'forward + backward'
    plot([('tokens N', f'{phase} [ms]', series_t),
          ('tokens N', f'{phase} GMAC/s', series_r)], stem + '.png', title)
    print(f'wrote {stem}.csv and {stem}.png ({fmt(len(rows), "d")} rows)')
