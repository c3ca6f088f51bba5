"""Training steps of linearizing Swin-T into SoLA-S (issue 36), measured: Stage I and
Stage II of ``configs/linearize/sola-s_swin-t_stage{1,2}.py`` (the real distillers,
random weights), SoLA-S and mmseg's Swin-T each trained as a classifier (global
average, linear head, cross entropy: a pretraining step), AdamW, bf16 autocast on
CUDA; a process per case. The estimate it checks: tools/analysis/linearize_cost.py.

    python tools/benchmarks/run.py --suite linearize                    # GPU, 224^2, batch 128
    python tools/benchmarks/run.py --suite linearize --device cpu --size 64 --batch 2
"""
import os.path as osp

import torch

from tools.benchmarks.common import (ROOT, min_time, process_peak_mib, report, run_child,
                                     torch_dtype)

CONFIG = osp.join(ROOT, 'configs', 'linearize', 'sola-s_swin-t_stage{}.py')
CASES = ('stage1', 'stage2', 'sola-s-pretrain', 'mmseg-swin-t-pretrain')
REFERENCE = 'mmseg-swin-t-pretrain'
REPEAT = 5


def add_arguments(p):
    p.add_argument('--size', type=int, default=224, help='input H = W (default 224)')
    p.add_argument('--batch', type=int, default=128,
                   help='images per step (default 128, the configs\' per GPU)')
    p.add_argument('--cases', nargs='+', default=list(CASES), choices=CASES)


class Classifier(torch.nn.Module):
    """A backbone's last map, averaged, into a linear head: the pretraining step."""

    def __init__(self, backbone, channels=768, num_classes=1000):
        super().__init__()
        self.backbone = backbone
        self.head = torch.nn.Linear(channels, num_classes)

    def forward(self, x, labels):
        logits = self.head(self.backbone(x)[-1].float().mean((2, 3)))
        return dict(loss=torch.nn.functional.cross_entropy(logits, labels))


def build(case):
    """The model of ``case``; calling it on images and labels returns its losses."""
    if case.startswith('stage'):
        from mmengine.config import Config
        from mmhybrid.registry import build_model
        model = build_model(Config.fromfile(CONFIG.format(case[-1])).model)
        return lambda x, labels: model(x, mode='loss'), model
    if case == 'sola-s-pretrain':
        from mmhybrid.models.backbones import SoLAVision
        backbone = SoLAVision(arch='s', out_indices=(3, ))
    else:  # mmseg's defaults are Swin-T's
        from mmseg.models.backbones import SwinTransformer
        backbone = SwinTransformer(out_indices=(3, ))
    model = Classifier(backbone)
    return model, model


def single(case, args):
    """One training step of ``case['case']``, timed in this process."""
    device, batch, size = args.device, args.batch, args.size
    step_fn, model = build(case['case'])
    model.to(device).train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-4)
    amp = dict(device_type=device, dtype=torch_dtype(args), enabled=device == 'cuda')
    x = torch.randn(batch, 3, size, size, device=device)
    labels = torch.randint(0, 1000, (batch, ), device=device)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(**amp):
            losses = step_fn(x, labels)
        sum(losses.values()).backward()
        optimizer.step()

    seconds = min_time(step, args.repeat, device, warmup=2)
    return dict(step_ms=1e3 * seconds, img_per_s=batch / seconds,
                peak_mb=process_peak_mib(device),
                trained_m=sum(p.numel() for p in params) / 1e6)


def main(args):
    rows = []
    for case in args.cases:
        row = run_child(dict(case=case))
        rows.append(dict(case=case, size=args.size, batch=args.batch, **row))
        print(f"  {case}: {row.get('img_per_s', float('nan')):.1f} img/s {row['status']}",
              flush=True)
    ref = next((r for r in rows if r['case'] == REFERENCE and r['status'] == 'ok'), None)
    for r in rows:
        if ref and r['status'] == 'ok':
            r['time_vs_swin_t'] = ref['img_per_s'] / r['img_per_s']
    amp = 'AMP ' if args.device == 'cuda' else ''
    title = (f'Linearization training steps, {args.size}x{args.size}, batch {args.batch}, '
             f'{amp}{str(torch_dtype(args))[6:]}, AdamW, min of {args.repeat} after 2 warm-up')
    columns = [('case', 'case', ''), ('size', 'size', 'd'), ('batch', 'batch', 'd'),
               ('ms/step', 'step_ms', '.1f'), ('img/s', 'img_per_s', '.1f'),
               ('time per image vs Swin-T pretraining', 'time_vs_swin_t', '.2f'),
               ('trained params (M)', 'trained_m', '.2f'), ('peak MB', 'peak_mb', '.0f'),
               ('status', 'status', '')]
    report(args, f'linearize_{args.device}', title, rows, columns)
