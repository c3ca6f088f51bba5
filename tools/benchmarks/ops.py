"""Token-mixing ops against a C x C linear layer at the stage shapes of the backbone
that uses them, forward and forward + backward: ms, the op's own GMACs (the
method's formula where a kernel hides its arithmetic; forward + backward counts
3x), GMAC/s, both as ratios to ``nn.Linear(C, C)``, peak memory; on GPU the
bandwidth over the copy bandwidth. ``gdn`` runs on 2B sequences (both scans)."""
import math

import torch
import torch.nn.functional as F

from tools.benchmarks.common import fwd_bwd, min_time, report, torch_dtype

# (channels, heads, downsampling) per stage of the backbone each op serves
PYRAMID_T = [(96, 3, 4), (128, 4, 8), (192, 6, 16), (256, 8, 32)]
SWIN_T = [(96, 3, 4), (192, 6, 8), (384, 12, 16), (768, 24, 32)]
SHAPES = {'wkv': PYRAMID_T, 'gdn': PYRAMID_T, 'swa': PYRAMID_T,
          'effatt': SWIN_T, 'elfatt': SWIN_T, 'sdpa': SWIN_T,
          'infsa': [(1024, 64, 16)], 'historical': [(192, 3, 16)]}
QUADRATIC = ('sdpa', 'historical')
NAIVE = ('wkv', 'gdn', 'swa', 'historical')  # ops with a naive reference backend
# (B, N, C) tensors read + written by (forward, forward + backward)
IO = {'linear': (2, 5), 'wkv': (3, 9), 'gdn': (8, 22)}


def add_arguments(p):
    p.add_argument('--ops', nargs='+', default=list(SHAPES), choices=list(SHAPES))
    p.add_argument('--size', type=int, default=1024, help='input image side')
    p.add_argument('--stages', type=int, nargs='+', default=[1, 2, 3, 4])
    p.add_argument('--batch', type=int, default=1, help='images')
    p.add_argument('--naive', action='store_true', help='also the naive backends')
    p.add_argument('--no-backward', action='store_true', help='forward only')
    p.add_argument('--max-quadratic-tokens', type=int, default=16384,
                   help='largest N for O(N^2) ops and naive backends')


def make_case(op, backend, B, hw, C, heads, device, dtype):
    """(function of the tensors, tensors, parameters with gradients, MACs)."""
    from tools.analysis import flops as A
    from mmhybrid import ops as O
    N, d, kw = hw[0] * hw[1], C // heads, {'backend': backend} if backend else {}

    def rand(*shape, dtype=dtype):
        return torch.randn(*shape, device=device, dtype=dtype).requires_grad_()

    if op == 'wkv':
        w = ((torch.rand(C, device=device) * 8 - 5) / N).requires_grad_()
        u = torch.full((C, ), -1.2 / N, device=device).requires_grad_()
        # k, v in the layout SpatialMix feeds: channel-major off CUDA, channels last on it
        kv = [rand(B, N, C) if device == 'cuda' else
              torch.randn(C, B, N, dtype=dtype).permute(1, 2, 0).requires_grad_()
              for _ in range(2)]
        return (lambda k, v: O.bi_wkv(w, u, k, v, **kw), kv, [w, u], O.wkv_macs(B, N, C))
    if op == 'gdn':  # both scan directions of B sequences, as the G layer runs them
        t = [rand(B, N, heads, d) for _ in range(3)]
        t += [(-0.1 * torch.rand(B, N, heads, device=device)).requires_grad_(),
              torch.rand(B, N, heads, device=device, dtype=dtype).requires_grad_()]
        return (lambda *t: O.gated_delta_rule(*t, use_qk_l2norm_in_kernel=True,
                                              bidirectional=True, **kw)[0],
                t, [], O.delta_rule_macs(2 * B, N, heads, d, d))
    qkv = [rand(B, heads, N, d) for _ in range(3)]
    if op == 'swa':
        return (lambda *t: O.sliding_window_attention(*t, hw, 7, **kw), qkv, [],
                O.sliding_window_macs(B, heads, hw, (7, 7), d, d))
    if op == 'historical':  # the new history is an output, as inside a chain
        history = rand(B, heads, N, N, dtype=torch.float32)
        return (lambda q, k, v: O.historical_attention(q, k, v, history, **kw), qkv,
                [history], sum(O.historical_attention_macs(B, heads, N, d, d).values()))
    h = max(heads // 2, 1)
    fn = {'effatt': lambda *t: O.effatt(*t, **kw), 'sdpa': F.scaled_dot_product_attention,
          'infsa': lambda *t: O.linear_infsa(*t, **kw),  # ELFATT Eq. 8:
          'elfatt': lambda q, k, v: torch.cat((
              O.effatt(q[:, :h], k[:, :h], v[:, :h]),
              O.block_attention(q[:, h:], k[:, h:], v[:, h:], 49)), 1)}[op]
    with A.FlopCounter(torch.nn.Module()) as counter, torch.no_grad():
        fn(*qkv)  # matmuls and SDPA calls counted
    return fn, qkv, [], counter.result.total()


def rates(row, gmacs, linear, unit_bytes, bandwidth, io):
    """GMAC/s per phase, ratios to the ``linear`` row, peak over one input and,
    on GPU, the effective bandwidth of traffic ``io`` over the copy bandwidth."""
    row.update(gmacs=gmacs, peak_x_input=row.get('peak_mib', math.nan) * 2**20 / unit_bytes)
    for (phase, passes), units in zip((('fwd', 1), ('fwd_bwd', 3)), io):
        ms = row.get(f'{phase}_ms')
        if ms:
            row[f'{phase}_gmac_s'] = passes * gmacs / ms * 1e3
            if bandwidth:
                row[f'{phase}_bw_frac'] = units * unit_bytes / bandwidth / ms * 1e3
            if linear:
                row[f'{phase}_x_linear_time'] = ms / linear[f'{phase}_ms']
                row[f'{phase}_x_linear_rate'] = (row[f'{phase}_gmac_s'] /
                                                 linear[f'{phase}_gmac_s'])
    return row


def main(args):
    cuda, dtype = args.device == 'cuda', torch_dtype(args)
    rows, linears, bandwidth = [], {}, None
    if cuda:  # bytes/s of a device-to-device copy of 1 GiB
        src = torch.empty(2**28, device=args.device)
        bandwidth = 2 * src.nbytes / min_time(lambda: src.clone(), 5, args.device)
        print(f'copy bandwidth {bandwidth / 1e9:.0f} GB/s')
    for op in args.ops:
        for stage in [s for s in args.stages if s <= len(SHAPES[op])]:
            C, heads, down = SHAPES[op][stage - 1]
            hw = (-(-args.size // down), ) * 2
            B, N = args.batch, hw[0] * hw[1]
            shape, unit = dict(stage=stage, tokens=N, channels=C), B * N * C * dtype.itemsize
            if (N, C) not in linears:  # the yardstick, once per shape
                layer = torch.nn.Linear(C, C, device=args.device, dtype=dtype)
                x = torch.randn(B, N, C, device=args.device, dtype=dtype).requires_grad_()
                linears[N, C] = rates(dict(op='linear', **shape, heads=1, **fwd_bwd(
                    layer, [x], list(layer.parameters()), args)), B * N * C * C / 1e9,
                    None, unit, bandwidth, IO['linear'])
            linear = linears[N, C]
            names = [None] + ['torch'] * (cuda and op in ('wkv', 'gdn', 'effatt', 'infsa'))
            for backend in names + ['naive'] * (args.naive and op in NAIVE):
                name = op + (f'-{backend}' if backend else '')
                try:
                    if (op in QUADRATIC or backend == 'naive') and \
                            N > args.max_quadratic_tokens:
                        raise ValueError(f'O(N^2) above {args.max_quadratic_tokens} tokens')
                    fn, tensors, params, macs = make_case(op, backend, B, hw, C, heads,
                                                          args.device, dtype)
                    row = dict(op=name, **shape, heads=heads,
                               **fwd_bwd(fn, tensors, params, args))
                except (ImportError, ValueError, RuntimeError) as e:
                    print(f'  skipped {name} stage {stage}: {str(e)[:100]}')
                    continue
                rows.append(rates(row, macs / 1e9, linear, unit, bandwidth,
                                  IO.get(op, (4, 11))))
                print(f"  {name} stage {stage} N={N}: fwd {row['fwd_ms']:.2f} ms "
                      f"({row['fwd_x_linear_time']:.1f}x linear)", flush=True)
            if linear not in rows:
                rows.append(linear)
    title = (f'ops at the stage shapes of a {args.size}^2 input, batch {args.batch}, '
             f'{str(dtype)[6:]}, malloc {args.malloc}')
    columns = [('op', 'op', ''), ('stage', 'stage', 'd'), ('N', 'tokens', 'd'),
               ('C', 'channels', 'd'), ('GMACs', 'gmacs', '.3f')]
    for phase, label in (('fwd', 'fwd'), ('fwd_bwd', 'f+b')):
        columns += [(f'{label} ms', f'{phase}_ms', '.2f'),
                    (f'{label} GMAC/s', f'{phase}_gmac_s', '.1f'),
                    (f'{label} x linear time', f'{phase}_x_linear_time', '.2f'),
                    (f"{label} GMAC/s / linear's", f'{phase}_x_linear_rate', '.2f'),
                    (f'{label} bw', f'{phase}_bw_frac', '.0%')]
    columns += [('f+b peak MiB', 'peak_mib', '.1f'), ('peak x input', 'peak_x_input', '.1f')]
    phase = 'fwd' if args.no_backward else 'fwd_bwd'
    report(args, f'ops_{args.device}', title, rows,
           [c for c in columns if any(c[1] in r for r in rows)], 'tokens',
           {f'{phase}_ms': f'{phase} [ms]', f'{phase}_gmac_s': f'{phase} GMAC/s'},
           lambda r: r['op'])
