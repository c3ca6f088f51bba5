"""Linearization at toy scale: InfiniteVL's Table 4 in miniature, on the CPU.

A tiny Swin teacher (``SwinELFATT(attn='local')``, Swin's function) learns the toy
ImageNet classes until it is clearly better than chance. For each linear mixer a
tiny SoLA student of the teacher's widths and depths (that mixer in every layer
but the last of stages 3 and 4, which stay softmax) is then made four ways:

* ``scratch``: random initialisation;
* ``inherit``: the teacher's weights by each mixer's rule (``init_cfg``
  Pretrained on the teacher checkpoint), nothing trained;
* ``stage1``: inherit, then Stage I (layer-wise MSE, InfiniteVL Eq. 3) for the
  whole distillation budget;
* ``stage1+2``: inherit, then Stage I and Stage II (output maps + logits KL,
  Eq. 4) for half the budget each.

Each student, and the teacher as the reference, is then fine-tuned as the same
UPerNet on the toy ADE20K (same iterations, same seed), and its mIoU is read. By
default the backbone stays frozen there (``frozen_stages=4``: only the UPerNet
heads train), so the mIoU measures the features each start gives; with
``--train-backbone`` everything trains (at this toy scale a 120-iteration full
fine-tune brings every start to the same mIoU, a first run showed).
Prints a table (mIoU mean and spread over the seeds, the per-layer relative MSE
of the students against the teacher before and after Stage I), writes
``study.csv`` and ``study.png`` into ``--out``::

    python tools/analysis/linearize_study.py --out work_dirs/linearize_study
"""
import argparse
import copy
import csv
import json
import os
import os.path as osp

import numpy as np
import torch
from mmengine.config import Config
from mmengine.logging import MMLogger
from mmengine.registry import init_default_scope

import mmhybrid  # noqa: F401  registers our models
from mmhybrid.layers import mixer_letters
from tools._common import build_runner
from tools.toy_data import make_toy_ade20k, make_toy_imagenet

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
STAGE1 = osp.join(ROOT, 'configs/linearize/sola-s_swin-t_toy_stage1.py')
STAGE2 = osp.join(ROOT, 'configs/linearize/sola-s_swin-t_toy_stage2.py')
UPERNET = osp.join(ROOT, 'configs/sola/demo/upernet_sola-t_toy-ade.py')
DIMS = (16, 32, 64, 128)
TEACHER = dict(type='mmhybrid.SwinELFATT', attn='local', downsample='linear',
               arch=dict(embed_dims=16, depths=(2, 2, 2, 2), num_heads=(2, 4, 8, 16)),
               window_size=4, drop_path_rate=0., out_indices=(0, 1, 2, 3))
MEAN, STD = [123.675, 116.28, 103.53], [58.395, 57.12, 57.375]
VARIANTS = ('scratch', 'inherit', 'stage1', 'stage1+2')


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--out', default='work_dirs/linearize_study')
    p.add_argument('--mixers', nargs='+', default=['wkv', 'gated_deltanet'])
    p.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    p.add_argument('--teacher-iters', type=int, default=300)
    p.add_argument('--distill-iters', type=int, default=200,
                   help='the distillation budget of each distilled student')
    p.add_argument('--finetune-iters', type=int, default=80)
    p.add_argument('--train-backbone', action='store_true',
                   help='fine-tune the backbone too (default: frozen)')
    return p.parse_args()


def student(mixer, init=None):
    """The tiny SoLA: ``mixer`` everywhere but the last layer of stages 3-4."""
    m = {name: letter for letter, name in mixer_letters().items()}[mixer]
    cfg = dict(type='mmhybrid.SoLAVision', head_dim=8, hsb_routes=(),
               pretrain_img_size=64, drop_path_rate=0., out_indices=(0, 1, 2, 3),
               arch=dict(embed_dims=DIMS, mixers=f'{m}{m}/{m}{m}/{m}S/{m}S'))
    if init:
        cfg['init_cfg'] = dict(type='Pretrained', checkpoint=init)
    return cfg


def _run(cfg, work_dir, seed):
    cfg = Config(copy.deepcopy(cfg))
    cfg.work_dir, cfg.randomness = work_dir, dict(seed=seed)
    cfg.log_level = 'WARNING'
    cfg.default_hooks = dict(cfg.get('default_hooks', {}),
                             checkpoint=dict(type='CheckpointHook', interval=-1),
                             logger=dict(type='LoggerHook', interval=1000))
    init_default_scope(cfg.get('default_scope', 'mmengine'))
    return build_runner(cfg)


def _save(runner, path):
    torch.save({'state_dict': runner.model.state_dict()}, path)
    return path


def _cached(path, make):
    """``path`` if an earlier run of the study wrote it, else ``make(path)``."""
    return path if osp.isfile(path) else make(path)


def train_teacher(data, out, iters, path):
    """The toy ImageNet classifier, saved to ``path``."""
    pipeline = [dict(type='LoadImageFromFile'),
                dict(type='RandomResizedCrop', scale=64, crop_ratio_range=(0.6, 1.)),
                dict(type='RandomFlip', prob=0.5), dict(type='PackInputs')]
    loader = dict(batch_size=16, num_workers=0, sampler=dict(type='DefaultSampler',
                                                             shuffle=True),
                  dataset=dict(type='ImageNet', data_root=data, split='train',
                               pipeline=pipeline))
    cfg = dict(
        default_scope='mmpretrain',
        model=dict(type='ImageClassifier', backbone=dict(TEACHER, out_indices=(3, )),
                   neck=dict(type='GlobalAveragePooling'),
                   head=dict(type='LinearClsHead', num_classes=4, in_channels=DIMS[-1],
                             loss=dict(type='CrossEntropyLoss'), topk=(1, )),
                   data_preprocessor=dict(num_classes=4, mean=MEAN, std=STD,
                                          to_rgb=True)),
        train_dataloader=loader, train_cfg=dict(by_epoch=False, max_iters=iters),
        optim_wrapper=dict(optimizer=dict(type='AdamW', lr=2e-3, weight_decay=0.05)),
        param_scheduler=[dict(type='CosineAnnealingLR', T_max=iters, by_epoch=False,
                              eta_min=1e-5)])
    runner = _run(cfg, osp.join(out, 'teacher'), 0)
    runner.train()
    return _save(runner, path)


def distill(stage_cfg, backbone, teacher, data, iters, work_dir, seed):
    """One stage of the toy linearize config; returns the runner (trained)."""
    cfg = Config.fromfile(stage_cfg)
    cfg.model.teacher = dict(TEACHER, init_cfg=dict(type='Pretrained',
                                                    checkpoint=teacher))
    cfg.model.backbone = backbone
    if 'head' in cfg.model:
        cfg.model.head = dict(num_classes=4, in_channels=DIMS[-1])
    cfg.train_dataloader.dataset.data_root = osp.join(data, 'train')
    cfg.train_dataloader.update(batch_size=16, num_workers=0, persistent_workers=False)
    cfg.train_cfg.max_iters = iters
    cfg.load_from = None  # the student's init_cfg holds what it starts from
    cfg.param_scheduler = [dict(type='CosineAnnealingLR', T_max=iters,
                                by_epoch=False, eta_min=1e-5)]
    runner = _run(cfg.to_dict(), work_dir, seed)
    runner.train()
    return runner


def load_images(paths):
    """Toy images at 64x64 as a normalised (N, 3, 64, 64) batch."""
    import cv2
    images = [cv2.resize(cv2.imread(p)[..., ::-1], (64, 64)) for p in paths]
    x = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float()
    return (x - torch.tensor(MEAN)[:, None, None]) / torch.tensor(STD)[:, None, None]


def probe_images(data, count=32):
    """Fixed toy training images of every class, for the per-layer errors."""
    folder = osp.join(data, 'train')
    paths = sorted(osp.join(d, f) for d, _, files in os.walk(folder) for f in files)
    return load_images(paths[::max(len(paths) // count, 1)][:count])


def head_top1(backbone, teacher, data):
    """Top-1 (%) on the toy ImageNet val set of ``backbone`` under the teacher's
    own classifier (its linear head on the average of the last map): how much of
    the teacher's function a student keeps (chance: 25%)."""
    from mmhybrid.registry import build_model
    with open(osp.join(data, 'meta', 'val.txt')) as f:
        pairs = [line.split() for line in f if line.strip()]
    x = load_images([osp.join(data, 'val', name) for name, _ in pairs])
    labels = torch.tensor([int(label) for _, label in pairs])
    model = build_model(dict(backbone, out_indices=(3, )))
    model.init_weights()
    head = torch.load(teacher, map_location='cpu')['state_dict']
    with torch.no_grad():
        features = model.eval()(x)[-1].mean((2, 3))
        logits = features @ head['head.fc.weight'].T + head['head.fc.bias']
    return (logits.argmax(1) == labels).float().mean().item() * 100


def layer_errors(model, images):
    """``{(stage, layer): relative MSE}`` of a distiller's student layers."""
    with torch.no_grad():
        return model.eval().relative_errors(images)


def finetune(backbone, ade, iters, work_dir, seed, train_backbone=False):
    """The toy UPerNet from ``backbone`` (frozen unless ``train_backbone``);
    returns its mIoU."""
    cfg = Config.fromfile(UPERNET)
    cfg.model.backbone = dict(backbone, frozen_stages=-1 if train_backbone else 4)
    cfg.model.decode_head.update(in_channels=list(DIMS), channels=32)
    cfg.model.auxiliary_head.update(in_channels=DIMS[2], channels=16)
    cfg.data_root = ade
    for loader in (cfg.train_dataloader, cfg.val_dataloader):
        loader.dataset.data_root = ade
        loader.update(num_workers=0, persistent_workers=False)
    cfg.test_dataloader = cfg.val_dataloader
    cfg.train_cfg.update(max_iters=iters, val_interval=iters + 1)
    cfg.param_scheduler = [dict(type='PolyLR', eta_min=0., power=1.0, begin=0,
                                end=iters, by_epoch=False)]
    runner = _run(cfg.to_dict(), work_dir, seed)
    runner.train()
    return runner.val()['mIoU']


def students(mixer, teacher, data, args, seed, out):
    """``{variant: backbone config}`` of ``mixer``'s four students (their
    checkpoints kept in ``out``: a rerun reuses them)."""
    half = args.distill_iters // 2

    def stage1(path, iters=args.distill_iters):
        return _save(distill(STAGE1, student(mixer, teacher), teacher, data, iters,
                             osp.join(out, 'work'), seed), path)

    def stage2(path):
        first = _cached(osp.join(out, 'stage1-half.pth'),
                        lambda p: stage1(p, half))
        return _save(distill(STAGE2, student(mixer, first), teacher, data,
                             args.distill_iters - half, osp.join(out, 'work'), seed),
                     path)

    return {'scratch': student(mixer), 'inherit': student(mixer, teacher),
            'stage1': student(mixer, _cached(osp.join(out, 'stage1.pth'), stage1)),
            'stage1+2': student(mixer, _cached(osp.join(out, 'stage2.pth'), stage2))}


def stage1_errors(mixer, checkpoint, teacher, images):
    """The per-layer errors of a Stage I checkpoint's student."""
    from mmhybrid.registry import build_model
    cfg = Config.fromfile(STAGE1).model
    cfg.update(teacher=dict(TEACHER, init_cfg=dict(type='Pretrained',
                                                   checkpoint=teacher)),
               backbone=student(mixer, checkpoint))
    model = build_model(cfg.to_dict())
    model.init_weights()
    return layer_errors(model, images)


def plot(rows, errors, path):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    mixers = sorted({r['mixer'] for r in rows if r['mixer'] != 'teacher'})
    width = 0.8 / len(mixers)
    for i, mixer in enumerate(mixers):
        means = [np.mean([r['mIoU'] for r in rows if (r['mixer'], r['variant']) ==
                          (mixer, v)]) for v in VARIANTS]
        spread = [np.std([r['mIoU'] for r in rows if (r['mixer'], r['variant']) ==
                          (mixer, v)]) for v in VARIANTS]
        left.bar(np.arange(len(VARIANTS)) + i * width, means, width, yerr=spread,
                 label=mixer, capsize=3)
    teacher = np.mean([r['mIoU'] for r in rows if r['mixer'] == 'teacher'])
    left.axhline(teacher, color='k', ls='--', label='teacher (softmax)')
    left.set_xticks(np.arange(len(VARIANTS)) + 0.4 - width / 2, VARIANTS)
    left.set_ylabel('toy ADE20K mIoU after the same fine-tune')
    left.legend(fontsize=8)
    for (mixer, when), values in sorted(errors.items()):
        keys = sorted(values)
        right.plot(range(len(keys)), [values[k] for k in keys], marker='o',
                   ls='-' if when == 'after' else ':', label=f'{mixer}, {when} Stage I')
        right.set_xticks(range(len(keys)), [f'{s}.{l}' for s, l in keys])
    right.set_yscale('log')
    right.set_xlabel('student layer (stage.layer)')
    right.set_ylabel('relative MSE to the teacher layer')
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    args = parse_args()
    os.makedirs(args.out, exist_ok=True)
    MMLogger.get_instance('mmengine', log_level='WARNING')
    data = make_toy_imagenet(osp.join(args.out, 'imagenet'), 48, 8, size=64)
    ade = make_toy_ade20k(osp.join(args.out, 'ade'))
    teacher = _cached(osp.join(args.out, 'teacher.pth'),
                      lambda p: train_teacher(data, args.out, args.teacher_iters, p))
    teacher_cfg = dict(TEACHER, init_cfg=dict(type='Pretrained', checkpoint=teacher))
    images = probe_images(data)
    cache_path = osp.join(args.out, 'results.json')
    cache = json.load(open(cache_path)) if osp.isfile(cache_path) else {}

    def measure(mixer, variant, seed, backbone, out):
        key = f'{mixer}/{variant}/{seed}/{args.finetune_iters}/{args.train_backbone}'
        if key not in cache:
            cache[key] = dict(
                top1=head_top1(backbone, teacher, data),
                mIoU=float(finetune(backbone, ade, args.finetune_iters,
                                    osp.join(out, 'ft'), seed, args.train_backbone)))
            json.dump(cache, open(cache_path, 'w'), indent=1)
        row = dict(mixer=mixer, variant=variant, seed=seed, **cache[key])
        print(f"{mixer} {variant} seed {seed}: top-1 {row['top1']:.1f}%, "
              f"mIoU {row['mIoU']:.2f}", flush=True)
        return row

    rows = [measure('teacher', 'teacher', seed, teacher_cfg, args.out)
            for seed in args.seeds]
    errors = {}
    for mixer in args.mixers:
        for seed in args.seeds:
            out = osp.join(args.out, mixer, str(seed))
            made = students(mixer, teacher, data, args, seed, out)
            if seed == args.seeds[0]:
                errors[(mixer, 'before')] = stage1_errors(mixer, teacher, teacher,
                                                          images)
                errors[(mixer, 'after')] = stage1_errors(
                    mixer, osp.join(out, 'stage1.pth'), teacher, images)
            rows += [measure(mixer, variant, seed, backbone, out)
                     for variant, backbone in made.items()]
    report(rows, errors, args)
    plot(rows, errors, osp.join(args.out, 'study.png'))
    print(f'wrote {osp.join(args.out, "study.csv")} and study.png')


def report(rows, errors, args):
    with open(osp.join(args.out, 'study.csv'), 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=['mixer', 'variant', 'seed', 'top1',
                                               'mIoU'])
        writer.writeheader()
        writer.writerows(rows)
    backbone = 'trained' if args.train_backbone else 'frozen'
    print(f'\nUPerNet fine-tune {args.finetune_iters} iterations (backbone {backbone}); '
          f'distillation {args.distill_iters} iterations; seeds {args.seeds}; '
          'mean +- std over seeds')
    print('| student | ' + ' | '.join(VARIANTS) + ' |')
    print('| --- |' + ' --- |' * len(VARIANTS))
    for metric, label in (('top1', 'teacher-head top-1 %'), ('mIoU', 'mIoU')):
        for mixer in args.mixers:
            cells = []
            for variant in VARIANTS:
                values = [r[metric] for r in rows
                          if (r['mixer'], r['variant']) == (mixer, variant)]
                cells.append(f'{np.mean(values):.1f} +- {np.std(values):.1f}')
            print(f'| {mixer}, {label} | ' + ' | '.join(cells) + ' |')
        values = [r[metric] for r in rows if r['mixer'] == 'teacher']
        print(f'| teacher (softmax), {label} | {np.mean(values):.1f} +- '
              f'{np.std(values):.1f} | | | |')
    print(f'\nper-layer relative MSE to the teacher layer (seed {args.seeds[0]}):')
    for (mixer, when), values in sorted(errors.items()):
        print(f'  {mixer} {when} Stage I: ' + ', '.join(
            f'{s}.{l} {v:.4f}' for (s, l), v in sorted(values.items())) +
            f'; mean {np.mean(list(values.values())):.4f}')


if __name__ == '__main__':
    main()
