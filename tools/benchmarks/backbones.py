"""UPerNet backbones (our configs, mmseg's own) against mmseg's Swin-T, a process
per case. CPU: backbone forward per size (ms, ratio, GMACs, GMAC/s, time exponent
vs pixels from the smallest size, global softmax share, the matmul work of a profiled
forward) and one UPerNet training step; GPU: the whole UPerNet, training (AMP) and
whole-image inference."""
import importlib
import math
import os.path as osp
import time

import torch

from tools.benchmarks.common import (ROOT, malloc_env, min_time, process_peak_mib, report,
                                     run_child, torch_dtype)

MMSEG = 'mmseg::{0}/{0}-{1}_upernet_8xb2-160k_ade20k-512x512.py'
MODELS = {
    **{m: f'configs/{d}/upernet_{m}_ade20k.py' for d, m in (
        ('sola', 'sola-t'), ('sola', 'sola-b'), ('elfatt', 'swin-t-elfatt'),
        ('elfatt', 'cswin-t-elfatt'), ('infinitevl', 'infinitevl-t'),
        ('infvit', 'infvit-linear-4l'))},
    'mmseg-swin-t': MMSEG.format('swin', 'tiny-patch4-window7-in1k-pre'),
    'mmseg-swin-b': MMSEG.format('swin', 'base-patch4-window7-in1k-pre'),
    'mmseg-vit-b': 'mmseg::vit/vit_vit-b16_mln_upernet_8xb2-160k_ade20k-512x512.py'}
REFERENCE = 'mmseg-swin-t'
# no global softmax layer (no SoLA arch has only W/G/L layers): --large-sizes
LINEAR = ('infinitevl-t', 'infvit-linear-4l', REFERENCE)
# global softmax mixers (and their names before the consolidation, for --compare)
GLOBAL_SOFTMAX = ('SoftmaxAttention', 'MultiheadSelfAttention', 'GlobalAttention')
GPU_CASES = [('train', 512, 512), ('infer', 512, 2048), ('infer', 2048, 2048),
             ('infer', 4096, 4096)]


def add_arguments(p):
    p.add_argument('--models', nargs='+', choices=list(MODELS), default=[
        'sola-t', 'swin-t-elfatt', 'cswin-t-elfatt', 'infinitevl-t',
        'infvit-linear-4l', REFERENCE])
    p.add_argument('--sizes', type=int, nargs='+', default=[512, 1024], help='CPU inputs')
    p.add_argument('--large-sizes', type=int, nargs='*', default=[], help=f'for {LINEAR}')
    p.add_argument('--train-size', type=int, default=256, help='CPU train step; 0: none')
    p.add_argument('--train-batch', type=int, default=None, help='2 on CPU, 8 on GPU')
    p.add_argument('--malloc-modes', nargs='+', choices=['default', 'tuned'],
                   help='run every case with each allocator setting')
    p.add_argument('--compare', nargs='+', metavar='NAME=PATH', help='checkouts to run')
    p.add_argument('--compare-models', nargs='+',
                   help='models run with every --compare checkout (others: the first)')
    p.add_argument('--no-extras', action='store_true', help='CPU: no MACs, no hooks')
    p.add_argument('--time-cap', type=float, default=900., help='seconds per case')


def build_segmentor(name, root):
    """The config's UPerNet, no pretrained weights, plain BatchNorm."""
    import mmhybrid  # noqa: F401  (registers our modules)
    from mmengine.model import revert_sync_batchnorm
    from mmseg.apis import init_model
    path = MODELS[name]
    if '::' in path:  # the package's shipped configs
        package, path = path.split('::')
        root = osp.join(osp.dirname(importlib.import_module(package).__file__),
                        '.mim', 'configs')
    return revert_sync_batchnorm(init_model(osp.join(root, path), device='cpu'))


def global_softmax_share(module, x):
    """Share of one forward spent inside global softmax mixers (CPU ops are
    synchronous: the wall time between hooks is theirs)."""
    spent, starts = [], []
    hooks = [(m.register_forward_pre_hook(lambda *_: starts.append(time.perf_counter())),
              m.register_forward_hook(lambda *_: spent.append(time.perf_counter() -
                                                              starts.pop())))
             for m in module.modules() if type(m).__name__ in GLOBAL_SOFTMAX]
    with torch.inference_mode():
        total = min_time(lambda: module(x), 1, 'cpu', warmup=0)
    return sum(spent) / total if hooks else None  # the last use of the module


# matmul-type ops: dense (linear layers, convolutions) and batched small ones
GEMMS = {'aten::mm': 'dense', 'aten::addmm': 'dense', 'aten::conv2d': 'dense',
         'aten::bmm': 'batched', 'aten::baddbmm': 'batched',
         'aten::scaled_dot_product_attention': 'batched'}
PROFILE_KEYS = ('gemm_share', *(f'{kind}_{what}' for kind in ('dense', 'batched')
                                for what in ('gmacs', 'share', 'gmac_per_s')))


def _gemm_kind(event):
    """'dense', 'batched' or None (not a matmul; a depth-wise conv moves memory)."""
    if event.name == 'aten::conv2d' and event.input_shapes[1][1] == 1:
        return None
    return GEMMS.get(event.name)


def gemm_profile(module, x):
    """Matmul-type work of one forward from the profiler, dense and batched: the
    multiply-adds those ops execute (a chunked form's extra work and masked keys
    included; SDPA's from its shapes), their rate, and the share of the forward's
    CPU time they take. Everything else (elementwise, copies, norms, gathers,
    depth-wise convs) moves memory: with it free, the forward would take the two
    shares of its time."""
    from torch.profiler import ProfilerActivity, profile
    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU],
                                         with_flops=True, record_shapes=True) as prof:
        module(x)
    events = prof.events()
    macs, spent = dict(dense=0., batched=0.), dict(dense=0., batched=0.)
    for e in events:
        parent, kind = e.cpu_parent, _gemm_kind(e)
        while parent is not None and _gemm_kind(parent) is None:
            parent = parent.cpu_parent
        if kind is None or parent is not None:
            continue  # not a GEMM, or inside one already counted
        if e.name == 'aten::scaled_dot_product_attention':
            (*batch, queries, d), (*_, keys, _), (*_, dv) = e.input_shapes[:3]
            macs[kind] += math.prod(batch) * queries * keys * (d + dv)
        else:
            macs[kind] += e.flops / 2
        spent[kind] += e.cpu_time_total
    total = sum(e.cpu_time_total for e in events if e.cpu_parent is None)
    row = dict(gemm_share=sum(spent.values()) / total)
    for kind in macs:
        row.update({f'{kind}_gmacs': macs[kind] / 1e9,
                    f'{kind}_share': spent[kind] / total,
                    f'{kind}_gmac_per_s': macs[kind] / max(spent[kind], 1e-9) * 1e-3})
    return row


def single(case, args):
    """One case in this process."""
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    device, (h, w), mode, batch = args.device, case['size'], case['mode'], case['batch']
    model, dtype = build_segmentor(case['model'], case['root']).to(device), torch_dtype(args)
    amp = dict(device_type=device, dtype=dtype, enabled=device == 'cuda')
    x = torch.randn(batch, 3, h, w, device=device)
    metas = [dict(img_shape=(h, w), pad_shape=(h, w), ori_shape=(h, w))] * batch
    module = model.backbone if mode == 'backbone' else model
    module.eval()  # mmseg's SwinTransformer.train() returns None
    if mode != 'train':
        def step():
            with torch.inference_mode(), torch.autocast(**amp):
                model.backbone(x) if mode == 'backbone' else model.encode_decode(x, metas)
    else:
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        scaler = torch.amp.GradScaler(enabled=amp['enabled'] and dtype == torch.float16)
        samples = [SegDataSample(metainfo=m, gt_sem_seg=PixelData(
            data=torch.randint(0, 150, (1, h, w), device=device))) for m in metas]

        def step():
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(**amp):
                losses = model.loss(x, samples)
            scaler.scale(sum(v for k, v in losses.items() if 'loss' in k)).backward()
            scaler.step(optimizer)
            scaler.update()
    seconds = min_time(step, args.repeat, device)  # an OOM is the parent's status
    row = dict(time_ms=1e3 * seconds, img_per_s=batch / seconds,
               peak_mb=process_peak_mib(device),
               params_m=sum(p.numel() for p in module.parameters()) / 1e6)
    if case['extras']:
        from tools.analysis.flops import count_flops
        row.update(gmacs=count_flops(module, x).total() / 1e9,
                   global_share=global_softmax_share(module, x),
                   **gemm_profile(module, x))
    return row


def main(args):
    variants = {k: osp.abspath(v) for k, v in (
        a.split('=', 1) for a in args.compare or [f'this={ROOT}'])}
    mallocs, rows = args.malloc_modes or [args.malloc], []
    cases = [(mode, m, (h, w), args.train_batch or 8 if mode == 'train' else 1)
             for mode, h, w in GPU_CASES for m in args.models]  # (mode, model, size, batch)
    if args.device == 'cpu':
        cases = [('backbone', m, (s, s), 1) for s in args.sizes for m in args.models] + [
            ('backbone', m, (s, s), 1) for s in args.large_sizes for m in LINEAR
            if m in args.models] + [('train', m, (args.train_size, ) * 2, args.train_batch
                                     or 2) for m in args.models if args.train_size]
    for mode, model, (h, w), batch in cases:
        for malloc in mallocs:
            for i, (variant, root) in enumerate(variants.items()):
                if i and args.compare_models and model not in args.compare_models:
                    continue
                # MACs and shares do not depend on the allocator: measured once
                case = dict(model=model, mode=mode, size=(h, w), batch=batch, root=root,
                            extras=mode == 'backbone' and not args.no_extras and
                            malloc == mallocs[0])
                env = malloc_env(malloc, PYTHONPATH=root, OMP_NUM_THREADS=str(args.threads))
                r = run_child(case, args.time_cap, env)
                rows.append(dict(variant=variant, malloc=malloc, model=model, mode=mode,
                                 size=f'{h}x{w}', pixels=h * w, batch=batch, **r))
                print(f'  {variant} {malloc} {model} {mode} {h}x{w}: '
                      f'{r.get("time_ms", math.nan):.0f} ms {r["status"]}', flush=True)
    ok = [r for r in rows if r['status'] == 'ok']
    first = {}  # (variant, model, mode, size): the row with MACs; (.., malloc): smallest
    for r in sorted(ok, key=lambda r: r['pixels']):
        first.setdefault((r['variant'], r['model'], r['mode'], r['size']), r)
        first.setdefault((r['variant'], r['model'], r['mode'], r['malloc']), r)
    ref = {(r['variant'], r['malloc'], r['mode'], r['size']): r for r in ok
           if r['model'] == REFERENCE}
    for r in ok:
        src = first[(r['variant'], r['model'], r['mode'], r['size'])]
        for key in ('gmacs', 'global_share', *PROFILE_KEYS):
            r.setdefault(key, src.get(key))
        key = (r['malloc'], r['mode'], r['size'])  # this checkout's Swin-T, or the first's
        base = ref.get((r['variant'], *key)) or ref.get((next(iter(variants)), *key))
        if base:
            r.update(vs_swin_t=r['time_ms'] / base['time_ms'],
                     mem_vs_swin_t=r['peak_mb'] / base['peak_mb'])
            if r.get('gemm_share'):
                r['gemm_only_vs_swin_t'] = r['vs_swin_t'] * r['gemm_share']
        if r['gmacs']:
            r['gmac_per_s'] = r['gmacs'] / r['time_ms'] * 1e3
        low = first[(r['variant'], r['model'], r['mode'], r['malloc'])]
        if r['mode'] == 'backbone' and low is not r:
            r['exponent'] = (math.log(r['time_ms'] / low['time_ms']) /
                             math.log(r['pixels'] / low['pixels']))
    amp = 'AMP ' if args.device == 'cuda' else ''
    title = f'UPerNet backbones, {amp}{str(torch_dtype(args))[6:]}'
    columns = [('variant', 'variant', ''), ('malloc', 'malloc', ''), ('model', 'model', ''),
               ('mode', 'mode', ''), ('size', 'size', ''), ('batch', 'batch', 'd'),
               ('ms', 'time_ms', '.0f'), ('vs Swin-T', 'vs_swin_t', '.2f'),
               ('GMACs', 'gmacs', '.1f'), ('GMAC/s', 'gmac_per_s', '.1f'),
               ('exponent from smallest size', 'exponent', '.2f'),
               ('global softmax share', 'global_share', '.0%'),
               *((f'{key[:key.index("_")]} GEMM {name}', key, fmt) for key, (name, fmt) in
                 zip(PROFILE_KEYS[1:], [('GMACs', '.1f'), ('share', '.0%'),
                                        ('GMAC/s', '.1f')] * 2)),
               ('GEMMs alone vs Swin-T', 'gemm_only_vs_swin_t', '.2f'),
               ('peak MB', 'peak_mb', '.0f'), ('status', 'status', '')]
    report(args, f'backbones_{args.device}', title, rows, columns, 'pixels',
           {'time_ms': 'time per image [ms]', 'gmac_per_s': 'GMAC/s'},
           lambda r: ' '.join((r['model'], r['mode'], r['variant'], r['malloc'])))
