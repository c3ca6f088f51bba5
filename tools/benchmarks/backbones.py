"""UPerNet backbones against mmseg's Swin-T, one run, each case in its own process.

Models come from configs through the registries: ours from ``configs/`` and
mmseg's own Swin-T / Swin-B / ViT-B UPerNet configs (``mmseg::...``).

CPU (default without CUDA): per model and square size, the backbone's forward
(batch 1, float32): ms, ratio to mmseg Swin-T at that size, GMACs (the
multiply-adds :mod:`mmhybrid.analysis` counts, as ``get_flops`` does), GMAC/s,
and the share of the forward spent in global softmax attention layers (forward
hooks); the time exponent vs pixels per model; and one UPerNet training step
(forward + backward + AdamW, ``--train-size``, ``--train-batch``) as a ratio to
UPerNet-Swin-T's. ``--large-sizes`` adds sizes for the models without global
softmax layers. ``--malloc-modes default tuned`` runs every case with glibc as
it is and with the tuned allocator; ``--compare NAME=PATH`` runs every case once
per checkout of this repository (before/after tables from one run).

GPU (default with CUDA): the whole UPerNet, 512x512 training steps (AMP) and
whole-image inference at 512x2048, 2048x2048 and 4096x4096.
"""
import os
import os.path as osp
import time

import torch

from common import (ROOT, fmt, malloc_env, markdown_table, min_time, plot,
                    process_peak_mib, run_child, save, scaling_exponent)

MODELS = {
    'sola-t': 'configs/sola/upernet_sola-t_ade20k.py',
    'sola-b': 'configs/sola/upernet_sola-b_ade20k.py',
    'swin-t-elfatt': 'configs/elfatt/upernet_swin-t-elfatt_ade20k.py',
    'cswin-t-elfatt': 'configs/elfatt/upernet_cswin-t-elfatt_ade20k.py',
    'infinitevl-t': 'configs/infinitevl/upernet_infinitevl-t_ade20k.py',
    'infvit-linear-4l': 'configs/infvit/upernet_infvit-linear-4l_ade20k.py',
    'mmseg-swin-t': 'mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_'
                    '8xb2-160k_ade20k-512x512.py',
    'mmseg-swin-b': 'mmseg::swin/swin-base-patch4-window7-in1k-pre_upernet_'
                    '8xb2-160k_ade20k-512x512.py',
    'mmseg-vit-b': 'mmseg::vit/vit_vit-b16_mln_upernet_8xb2-160k_ade20k-512x512.py',
}
DEFAULT_MODELS = ['sola-t', 'swin-t-elfatt', 'cswin-t-elfatt', 'infinitevl-t',
                  'infvit-linear-4l', 'mmseg-swin-t']
# no global softmax layer: time should grow linearly with pixels
LINEAR = ('infinitevl-t', 'infvit-linear-4l', 'mmseg-swin-t')
# token mixers that attend globally with softmax (SoLA 'S', ELFATT GLOBAL)
# global softmax mixers (and their names before the consolidation, for --compare)
GLOBAL_SOFTMAX = ('SoftmaxAttention', 'MultiheadSelfAttention', 'GlobalAttention')
REFERENCE = 'mmseg-swin-t'
GPU_CASES = [('train', 512, 512), ('infer', 512, 2048), ('infer', 2048, 2048),
             ('infer', 4096, 4096)]


def add_arguments(parser):
    parser.add_argument('--models', nargs='+', default=DEFAULT_MODELS,
                        choices=list(MODELS))
    parser.add_argument('--sizes', type=int, nargs='+', default=[512, 1024],
                        help='CPU: square backbone input sizes')
    parser.add_argument('--large-sizes', type=int, nargs='*', default=[],
                        help='CPU: more sizes for the models without global '
                        f'softmax layers ({", ".join(LINEAR)})')
    parser.add_argument('--train-size', type=int, default=256,
                        help='CPU: UPerNet training step input (0: none)')
    parser.add_argument('--train-batch', type=int, default=None,
                        help='images per training step (2 on CPU, 8 on GPU)')
    parser.add_argument('--amp-dtype', default='bfloat16',
                        choices=['bfloat16', 'float16'], help='GPU AMP dtype')
    parser.add_argument('--malloc-modes', nargs='+', default=None,
                        choices=['default', 'tuned'],
                        help='run every case with these allocator settings '
                        '(default: this process\'s)')
    parser.add_argument('--compare', nargs='+', default=None, metavar='NAME=PATH',
                        help='checkouts of this repository to run the cases with')
    parser.add_argument('--compare-models', nargs='+', default=None,
                        help='models run with every checkout of --compare (the '
                        'others with the first only; default: all)')
    parser.add_argument('--no-extras', action='store_true',
                        help='CPU: time only (no MAC count, no layer hooks)')
    parser.add_argument('--time-cap', type=float, default=900.,
                        help='seconds per case (build, warm-up and repeats)')


def config_path(path, root):
    """``pkg::rel`` -> the file shipped in the installed package's ``.mim/configs``;
    other paths are relative to the repository checkout ``root``."""
    if '::' not in path:
        return osp.join(root, path)
    import importlib
    package, rel = path.split('::')
    base = osp.dirname(importlib.import_module(package).__file__)
    return osp.join(base, '.mim', 'configs', rel)


def build_segmentor(name, root):
    """The config's UPerNet segmentor, no pretrained weights, plain BatchNorm."""
    import mmhybrid  # noqa: F401  (registers our modules)
    from mmengine.config import Config
    from mmengine.model import revert_sync_batchnorm
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS as SEG_MODELS
    cfg = Config.fromfile(config_path(MODELS[name], root))
    init_default_scope('mmseg')
    cfg.model.pretrained = None
    cfg.model.backbone.init_cfg = None
    return revert_sync_batchnorm(SEG_MODELS.build(cfg.model))


def global_softmax_seconds(module, x):
    """Seconds of one forward spent inside global softmax mixers (CPU: ops are
    synchronous, so wall time between hooks is their time)."""
    spent, starts, handles = [0.], [], []
    for m in module.modules():
        if type(m).__name__ in GLOBAL_SOFTMAX:
            handles.append(m.register_forward_pre_hook(
                lambda *_: starts.append(time.perf_counter())))
            handles.append(m.register_forward_hook(
                lambda *_: spent.__setitem__(0, spent[0] + time.perf_counter() -
                                             starts.pop())))
    if not handles:
        return None
    try:
        start = time.perf_counter()
        with torch.inference_mode():
            module(x)
        total = time.perf_counter() - start
    finally:
        for h in handles:
            h.remove()
    return spent[0] / total


def _metas(h, w, batch):
    return [dict(img_shape=(h, w), pad_shape=(h, w), ori_shape=(h, w))
            for _ in range(batch)]


def single(case, args):
    """One case in this process (the checkout's mmhybrid is first on the path)."""
    device, (h, w), mode = args.device, case['size'], case['mode']
    model = build_segmentor(case['model'], case['root']).to(device)
    amp = dict(device_type=device, dtype=getattr(torch, args.amp_dtype),
               enabled=device == 'cuda')
    batch = case.get('batch', 1)
    x = torch.randn(batch, 3, h, w, device=device)
    extra = {}
    if mode == 'backbone':
        module = model.backbone
        module.eval()  # mmseg's SwinTransformer.train() returns None

        def step():
            with torch.inference_mode():
                module(x)
    elif mode == 'infer':
        model.eval()
        metas = _metas(h, w, batch)

        def step():
            with torch.inference_mode(), torch.autocast(**amp):
                model.encode_decode(x, metas)
    else:
        from mmengine.structures import PixelData
        from mmseg.structures import SegDataSample
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        scaler = torch.amp.GradScaler(enabled=amp['enabled'] and
                                      args.amp_dtype == 'float16')
        samples = []
        for meta in _metas(h, w, batch):
            sample = SegDataSample(metainfo=meta)
            sample.gt_sem_seg = PixelData(
                data=torch.randint(0, 150, (1, h, w), device=device))
            samples.append(sample)

        def step():
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(**amp):
                losses = model.loss(x, samples)
            loss = sum(v for k, v in losses.items() if 'loss' in k)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
    if device == 'cuda':
        torch.cuda.reset_peak_memory_stats()
    try:
        seconds = min_time(step, args.repeat, device)
    except torch.OutOfMemoryError:
        return dict(status='OOM')
    peak = process_peak_mib(device)
    if mode == 'backbone' and case.get('extras'):
        from mmhybrid.analysis import count_flops
        extra['gmacs'] = count_flops(module, x).total() / 1e9
        extra['global_share'] = global_softmax_seconds(module, x)
    params = model.backbone if mode == 'backbone' else model
    return dict(time_ms=1e3 * seconds, img_per_s=batch / seconds, peak_mb=peak,
                params_m=sum(p.numel() for p in params.parameters()) / 1e6,
                **extra)


def cases(args):
    """(mode, model, (h, w), batch) of the run."""
    if args.device == 'cuda':
        batch = args.train_batch or 8
        return [(mode, m, (h, w), batch if mode == 'train' else 1)
                for mode, h, w in GPU_CASES for m in args.models]
    out = [('backbone', m, (s, s), 1) for s in args.sizes for m in args.models]
    out += [('backbone', m, (s, s), 1) for s in args.large_sizes
            for m in args.models if m in LINEAR]
    if args.train_size:
        out += [('train', m, (args.train_size, ) * 2, args.train_batch or 2)
                for m in args.models]
    return out


def add_ratios(rows):
    """Time and memory against mmseg Swin-T's with the same allocator, mode and
    size (and checkout, where it ran with it)."""
    ref = {}
    for r in rows:
        if r['model'] == REFERENCE and r['status'] == 'ok':
            ref[(r['variant'], r['malloc'], r['mode'], r['size'])] = r
            ref.setdefault((None, r['malloc'], r['mode'], r['size']), r)
    for r in rows:
        key = (r['malloc'], r['mode'], r['size'])
        base = ref.get((r['variant'], ) + key, ref.get((None, ) + key))
        ok = r['status'] == 'ok' and base is not None
        r['vs_swin_t'] = r['time_ms'] / base['time_ms'] if ok else None
        r['mem_vs_swin_t'] = r['peak_mb'] / base['peak_mb'] if ok else None
        if r.get('gmacs'):
            r['gmac_per_s'] = r['gmacs'] / r['time_ms'] * 1e3


def exponents(rows):
    """Time exponent vs pixels per (variant, malloc, model), backbone rows."""
    groups = {}
    for r in rows:
        if r['mode'] == 'backbone' and r['status'] == 'ok':
            groups.setdefault((r['variant'], r['malloc'], r['model']), []).append(
                (r['pixels'], r['time_ms']))
    out = {}
    for key, points in groups.items():
        points.sort()
        out[key] = [scaling_exponent(points[i:i + 2]) for i in range(len(points) - 1)]
    return out


def main(args):
    variants = dict(v.split('=', 1) for v in args.compare) if args.compare else {
        'this': ROOT}
    variants = {k: osp.abspath(v) for k, v in variants.items()}
    mallocs = args.malloc_modes or [args.malloc]
    rows = []
    for mode, model, (h, w), batch in cases(args):
        for malloc in mallocs:
            for variant, root in variants.items():
                if variant != next(iter(variants)) and args.compare_models and \
                        model not in args.compare_models:
                    continue
                # MACs and layer shares do not depend on the allocator
                extras = (mode == 'backbone' and not args.no_extras and
                          malloc == mallocs[0])
                case = dict(model=model, mode=mode, size=(h, w), batch=batch,
                            root=root, extras=extras)
                env = malloc_env(malloc)
                env['PYTHONPATH'] = root
                if args.device == 'cpu':
                    env['OMP_NUM_THREADS'] = str(args.threads)
                argv = ['--device', args.device, '--threads', str(args.threads),
                        '--repeat', str(args.repeat), '--amp-dtype', args.amp_dtype]
                r = run_child('backbones', case, argv, args.time_cap, env)
                r.update(model=model, mode=mode, size=f'{h}x{w}', pixels=h * w,
                         batch=batch, variant=variant, malloc=malloc)
                rows.append(r)
                took = fmt(r.get('time_ms'), '.1f') if r['status'] == 'ok' else \
                    r['status']
                print(f'  {variant} {malloc} {model} {mode} {h}x{w}: {took} ms',
                      flush=True)
    # MACs and shares measured once per (variant, model, size): copy to the others
    measured = {(r['variant'], r['model'], r['size']): r for r in rows
                if r.get('gmacs')}
    for r in rows:
        src = measured.get((r['variant'], r['model'], r['size']))
        if r['mode'] == 'backbone' and src is not None:
            r.setdefault('gmacs', src['gmacs'])
            r.setdefault('global_share', src.get('global_share'))
    add_ratios(rows)
    slopes = exponents(rows)
    for r in rows:
        key = (r['variant'], r['malloc'], r['model'])
        sizes = sorted({x['pixels'] for x in rows if (x['variant'], x['malloc'],
                        x['model']) == key and x['mode'] == 'backbone'
                        and x['status'] == 'ok'})
        if r['mode'] == 'backbone' and r['pixels'] in sizes[1:]:
            r['exponent'] = slopes[key][sizes.index(r['pixels']) - 1]

    title = (f'UPerNet backbones, {args.device_name}, float32 on CPU / AMP '
             f'{args.amp_dtype} on GPU; torch {torch.__version__}')
    print('\n' + title)
    columns = [('variant', 'variant', ''), ('malloc', 'malloc', ''),
               ('model', 'model', ''), ('mode', 'mode', ''), ('size', 'size', ''),
               ('batch', 'batch', 'd'), ('ms', 'time_ms', '.0f'),
               ('vs Swin-T', 'vs_swin_t', '.2f'), ('GMACs', 'gmacs', '.1f'),
               ('GMAC/s', 'gmac_per_s', '.1f'),
               ('exponent (from previous size)', 'exponent', '.2f'),
               ('global softmax share', 'global_share', '.0%'),
               ('peak MB', 'peak_mb', '.0f')]
    ok_or_status = [dict(r, time_ms=r.get('time_ms') if r['status'] == 'ok'
                         else r['status']) for r in rows]
    print(markdown_table(ok_or_status, columns))
    os.makedirs(args.out, exist_ok=True)
    fields = ['variant', 'malloc', 'model', 'mode', 'size', 'pixels', 'batch',
              'status', 'time_ms', 'img_per_s', 'vs_swin_t', 'gmacs', 'gmac_per_s',
              'exponent', 'global_share', 'peak_mb', 'mem_vs_swin_t', 'params_m']
    stem = save(rows, args.out, f'backbones_{args.device}', fields)
    series_t, series_r = {}, {}
    for r in rows:
        if r['mode'] != 'train' and r['status'] == 'ok':
            name = ' '.join(x for x in (r['model'], r['variant'] if len(variants) > 1
                                        else '', r['malloc'] if len(mallocs) > 1
                                        else '') if x)
            series_t.setdefault(name, []).append((r['pixels'], r['time_ms']))
            series_r.setdefault(name, []).append((r['pixels'], r.get('gmac_per_s')))
    plot([('pixels', 'time per image [ms]', series_t),
          ('pixels', 'GMAC/s', series_r)], stem + '.png', title)
    print(f'wrote {stem}.csv and {stem}.png')
