"""Linear / Pure InfViT and a softmax ViT of the same scaffold: latency and peak
memory (GPU: max allocated, CPU: process RSS) against resolution, a process each."""
import torch

from tools.benchmarks.common import min_time, process_peak_mib, report, run_child, torch_dtype

MODELS = {'linear': 'L', 'pure': 'P', 'vit': 'S'}
REPEAT = 1


def add_arguments(p):
    p.add_argument('--depth', default='4', choices=['4', '24', 'b'], help='layers or ViT-B')
    p.add_argument('--models', nargs='+', default=list(MODELS), choices=list(MODELS))
    p.add_argument('--resolutions', type=int, nargs='+', default=[224, 512, 1024, 2048])
    p.add_argument('--quadratic-max', type=int, default=1024,
                   help='largest resolution for pure InfSA and the ViT')
    p.add_argument('--batch', type=int, default=1)


def single(case, args):
    """One model at one resolution in this process."""
    from mmhybrid.models.backbones import InfViT
    arch = {'4': 'linear-4l', '24': 'linear-24l', 'b': 'linear-b'}[args.depth]
    # pure InfSA and softmax: the paper's 16-head layout of the same width
    model = InfViT(arch=arch) if case['model'] == 'linear' else InfViT(
        arch=arch.replace('linear', 'pure'), attn_types=MODELS[case['model']])
    dtype = torch_dtype(args, cuda='float32')
    model = model.to(device=args.device, dtype=dtype).eval()
    x = torch.randn(args.batch, 3, case['res'], case['res'], device=args.device,
                    dtype=dtype)
    with torch.inference_mode():
        seconds = min_time(lambda: model(x), max(args.repeat, 1), args.device,
                           warmup=int(args.repeat > 0))
    return dict(latency_ms=1e3 * seconds, img_per_s=args.batch / seconds,
                peak_mb=process_peak_mib(args.device),
                params_m=sum(p.numel() for p in model.parameters()) / 1e6)


def main(args):
    rows, dtype = [], str(torch_dtype(args, cuda='float32'))[6:]
    for res in args.resolutions:
        for name in args.models:
            if name == 'linear' or res <= args.quadratic_max:
                row = run_child(dict(model=name, res=res))
                rows.append(dict(model=f'{name}-{args.depth}l', res=res,
                                 tokens=(-(-res // 16))**2, **row))
                print(f"  {name} @ {res}: {row.get('latency_ms', float('nan')):.1f} ms",
                      flush=True)
    vit = {r['res']: r for r in rows if r['model'].startswith('vit') and
           r['status'] == 'ok'}
    for r in rows:
        if r['status'] == 'ok' and r['res'] in vit:
            r['speedup_vs_vit'] = vit[r['res']]['latency_ms'] / r['latency_ms']
            r['mem_vs_vit'] = r['peak_mb'] / vit[r['res']]['peak_mb']
    title = f'InfViT {args.depth}L inference, batch {args.batch}, {dtype}'
    columns = [('model', 'model', ''), ('res', 'res', 'd'), ('tokens', 'tokens', 'd'),
               ('latency ms', 'latency_ms', '.1f'), ('img/s', 'img_per_s', '.2f'),
               ('peak MB', 'peak_mb', '.0f'), ('speed-up vs ViT', 'speedup_vs_vit', '.2f'),
               ('memory vs ViT', 'mem_vs_vit', '.2f'), ('status', 'status', '')]
    report(args, 'infvit', title, rows, columns, 'res',
           {'latency_ms': 'latency [ms]', 'peak_mb': 'peak memory [MB]'},
           lambda r: r['model'])
