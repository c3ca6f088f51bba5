"""ELFATT's local blocks as square windows ('2d') or raster runs ('1d'): a toy ablation.

A tiny Swin-ELFATT UPerNet (the real mmseg model, built from
configs/elfatt/upernet_swin-t-elfatt_ade20k.py with a small width) is trained
from scratch on the toy ADE20K set (tools/toy_data.py; real
``ADE20KDataset`` and pipelines, through the mmengine ``Runner``) and scored on
its validation split. Arms differ only in ``block_layout``; everything else
(seed, data order, initialisation, schedule) is shared. Block sizes keep the
paper's geometry at 128^2 crops: 16-token blocks are 4x4 windows (1/8 of the
stage-1 map's width, as 7x7 on 56x56) in stages 1-2, and stage 3's 64-token
block is its whole 8x8 map (as 196 on 14x14).

Arms: ``1d`` (runs of the raster sequence, LePE on the image), ``2d`` (square
windows with per-window LePE, Eq. 10's ``L(f(V))``) and ``2d-image-lepe`` (square
windows, LePE on the image: separates the two changes).

    python projects/elfatt_block_layout/block_layout_toy.py [--iters 300] [--seeds 0 1]
"""
import argparse
import os.path as osp
import time

import torch
from mmengine.config import Config
from mmengine.runner import Runner

import mmhybrid  # noqa: F401  registers our models
from mmhybrid.layers import AttentionMixer, ELFATTAttention
from mmhybrid.utils import register_scope
from tools.results import write_csv
from tools.toy_data import make_toy_ade20k

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIG = osp.join(ROOT, 'configs/elfatt/upernet_swin-t-elfatt_ade20k.py')
DEMO = osp.join(ROOT, 'configs/sola/demo/upernet_sola-t_toy-ade.py')
ARMS = {'1d': '1d', '2d': '2d', '2d-image-lepe': '2d'}


def toy_config(layout, seed, iters, data_root, work_dir, batch):
    crop = (128, 128)
    cfg = Config.fromfile(CONFIG)
    cfg.work_dir = work_dir
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        cfg[loader].dataset.data_root = data_root
    cfg.randomness = dict(seed=seed)
    cfg.data_preprocessor.size = crop
    cfg.model.data_preprocessor.size = crop
    cfg.model.backbone.update(
        arch=dict(embed_dims=32, depths=(2, 2, 2, 2), num_heads=(2, 4, 8, 16)),
        window_size=4, block_sizes=(16, 16, 64, 16), block_layout=layout,
        drop_path_rate=0.)
    cfg.model.decode_head.update(in_channels=[32, 64, 128, 256], channels=64)
    cfg.model.auxiliary_head.update(in_channels=128, channels=32)
    # the toy pipelines of the demo config, without its photometric distortion
    demo = Config.fromfile(DEMO)
    train_pipeline = [t for t in demo.train_pipeline if t.type != 'PhotoMetricDistortion']
    test_pipeline = demo.test_pipeline
    cfg.train_dataloader.update(batch_size=batch, num_workers=0,
                                persistent_workers=False)
    cfg.train_dataloader.dataset.pipeline = train_pipeline
    for name in ('val_dataloader', 'test_dataloader'):
        cfg[name].update(num_workers=0, persistent_workers=False)
        cfg[name].dataset.pipeline = test_pipeline
    cfg.optim_wrapper.optimizer.lr = 1e-3
    warmup = min(20, iters // 2)
    cfg.param_scheduler = [
        dict(type='LinearLR', start_factor=1e-2, by_epoch=False, begin=0, end=warmup),
        dict(type='PolyLR', eta_min=0., power=1.0, begin=warmup, end=iters,
             by_epoch=False),
    ]
    cfg.train_cfg = dict(type='IterBasedTrainLoop', max_iters=iters,
                         val_interval=iters)
    cfg.default_hooks.logger.interval = 25
    cfg.default_hooks.checkpoint = dict(type='CheckpointHook', interval=-1)
    return cfg


def run(arm, seed, iters, data_root, out, batch):
    image_lepe = arm == '2d-image-lepe'
    positional = ELFATTAttention.positional
    if image_lepe:  # LePE on the whole image, windows for attention only
        ELFATTAttention.positional = AttentionMixer.positional
    try:
        cfg = toy_config(ARMS[arm], seed, iters, data_root,
                         osp.join(out, f'{arm}_seed{seed}'), batch)
        start = time.perf_counter()
        runner = Runner.from_cfg(cfg)
        runner.train()  # validates at the end
        metrics = {k: runner.message_hub.get_scalar(f'val/{k}').current()
                   for k in ('mIoU', 'mAcc', 'aAcc')}
    finally:
        ELFATTAttention.positional = positional
    return dict(arm=arm, seed=seed, iters=iters, **metrics,
                train_s=round(time.perf_counter() - start))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--iters', type=int, default=300)
    parser.add_argument('--batch', type=int, default=4)
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1])
    parser.add_argument('--arms', nargs='+', default=list(ARMS), choices=list(ARMS))
    parser.add_argument('--out', default='work_dirs/elfatt_block_layout_toy')
    parser.add_argument('--threads', type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    register_scope('mmseg')
    data_root = osp.join(args.out, 'toy_ade')
    if not osp.isdir(osp.join(data_root, 'annotations', 'validation')):
        make_toy_ade20k(data_root, num_train=96, num_val=48)
    rows = []
    for seed in args.seeds:
        for arm in args.arms:
            rows.append(r := run(arm, seed, args.iters, data_root, args.out, args.batch))
            print(f"{arm:14s} seed {seed}: mIoU {r['mIoU']:.2f} mAcc {r['mAcc']:.2f} "
                  f"aAcc {r['aAcc']:.2f} ({r['train_s']} s)", flush=True)
    print('\n| arm | mIoU per seed | mean mIoU | mean mAcc |\n|---|---|---|---|')
    for arm in args.arms:
        sel = [r for r in rows if r['arm'] == arm]
        per_seed = ' / '.join(f"{r['mIoU']:.2f}" for r in sel)
        print(f"| {arm} | {per_seed} | {sum(r['mIoU'] for r in sel) / len(sel):.2f} "
              f"| {sum(r['mAcc'] for r in sel) / len(sel):.2f} |")
    write_csv(rows, osp.join(args.out, 'results.csv'))
    print(f'wrote {args.out}/results.csv')


if __name__ == '__main__':
    main()
