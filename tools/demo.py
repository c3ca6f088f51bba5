"""Demo: SoLA-T learns toy segmentation and detection on the CPU in minutes.

Writes the toy ADE20K / COCO sets under data/toy if missing; trains every model
of SEG_MODELS (configs/sola/demo/) from scratch on toy ADE20K for the same
iterations and prints their mIoU beside the chance level (SoLA-T's prediction
pictures are saved); fine-tunes Mask R-CNN-SoLA-T from SoLA-T's backbone, as
the paper fine-tunes from ImageNet weights, and prints box / mask AP. One torch
thread by default: on a busy 2-core machine two threads run ~4x slower than one
(spinning OpenMP threads), on an idle one they gain less than 2x.
"""
import argparse
import glob
import os.path as osp
import sys
import time

import numpy as np
import torch
from PIL import Image

import mmhybrid  # noqa: F401  registers our models
from tools._common import build_runner, load_config
from tools.toy_data import make_toy_ade20k, make_toy_coco

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
# the first is the reference: its pictures are saved, its backbone starts the
# detection run and its mIoU must beat chance clearly
SEG_MODELS = [
    ('UPerNet-SoLA-T', 'configs/sola/demo/upernet_sola-t_toy-ade.py'),
    ('UPerNet-SoLA-T-GDN', 'configs/sola/demo/upernet_sola-t-gdn_toy-ade.py'),
    ('UPerNet-SoLA-T-HAViT', 'configs/sola/demo/upernet_sola-t-havit_toy-ade.py'),
]
DET_CONFIG = osp.join(ROOT, 'configs/sola/demo/mask-rcnn_sola-t_fpn_toy-coco.py')


def banner(text):
    print(f'\n{"=" * 78}\n{text}\n{"=" * 78}', flush=True)


def majority_miou(ann_dir):
    """mIoU of always predicting the most frequent class (the chance level)."""
    counts = np.zeros(256, np.int64)
    for path in glob.glob(osp.join(ann_dir, '*.png')):
        counts += np.bincount(np.asarray(Image.open(path)).ravel(), minlength=256)
    counts[0] = 0  # reduce_zero_label: 0 is ignored
    present = np.count_nonzero(counts)
    return 100 * counts.max() / counts.sum() / present


def val_metrics(runner):
    """The metrics of the validation that ends training."""
    hub = runner.message_hub
    return {k[len('val/'):]: v.current() for k, v in hub.log_scalars.items()
            if k.startswith('val/')}


def train_segmentation(args, config, work_dir, data_root, draw=False):
    """Train one toy-ADE20K config; returns its metrics, runner and step count."""
    cfg = load_config(osp.join(ROOT, config), work_dir=work_dir,
                      options=dict(data_root=data_root))
    if args.seg_iters:
        cfg.train_cfg.max_iters = cfg.train_cfg.val_interval = args.seg_iters
        warm_up, decay = cfg.param_scheduler[0], cfg.param_scheduler[-1]
        # short runs: the warm-up takes at most half of them
        warm_up.end = decay.begin = min(decay.begin, max(args.seg_iters // 2, 1))
        decay.end = args.seg_iters
        cfg.default_hooks.checkpoint.interval = args.seg_iters
    if draw:  # every 4th validation image with its ground truth and prediction
        cfg.default_hooks.visualization = dict(
            type='SegVisualizationHook', draw=True, interval=4)
    runner = build_runner(cfg)
    runner.train()  # validates at the end
    return val_metrics(runner), runner, cfg.train_cfg.max_iters


def train_detection(args, data_root, backbone):
    cfg = load_config(DET_CONFIG, work_dir=osp.join(args.out, 'det'),
                      options=dict(data_root=data_root))
    # a bare state dict: loads with torch's safe weights_only unpickler
    cfg.model.backbone.init_cfg = dict(type='Pretrained', checkpoint=backbone)
    if args.det_epochs:
        cfg.train_cfg.max_epochs = cfg.train_cfg.val_interval = args.det_epochs
        cfg.param_scheduler[-1].end = args.det_epochs
        cfg.param_scheduler[-1].milestones = [args.det_epochs - 1]
        cfg.default_hooks.checkpoint.interval = args.det_epochs
    runner = build_runner(cfg)
    runner.train()  # validates at the end
    return val_metrics(runner)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', default='work_dirs/demo')
    parser.add_argument('--data', default='data/toy', help='toy datasets (written if missing)')
    parser.add_argument('--seg-iters', type=int, help='segmentation iterations, >= 2 (config: 120)')
    parser.add_argument('--det-epochs', type=int, help='detection epochs (config: 3)')
    parser.add_argument('--threads', type=int, default=1,
                        help='torch CPU threads (default 1, see above)')
    parser.add_argument('--only-first', action='store_true',
                        help=f'train {SEG_MODELS[0][0]} only, no comparison')
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    start = time.time()

    banner('[1/3] toy datasets (ADE20K and COCO layouts)')
    ade, coco = osp.join(args.data, 'ade'), osp.join(args.data, 'coco')
    if not osp.isdir(osp.join(ade, 'annotations', 'validation')):
        make_toy_ade20k(ade)
    if not osp.isfile(osp.join(coco, 'annotations', 'instances_val2017.json')):
        make_toy_coco(coco)
    print(f'toy ADE20K: {ade}\ntoy COCO:   {coco}', flush=True)

    seg = []  # (name, mIoU, minutes)
    for i, (name, config) in enumerate(SEG_MODELS[:1 if args.only_first else None]):
        banner(f'[2/3] {name} on toy ADE20K (from scratch, CPU)')
        tic = time.time()
        # the reference keeps work_dirs/demo/seg; the others get seg_<name>
        work_dir = osp.join(args.out, 'seg' if i == 0 else
                            'seg_' + name.split('-', 1)[-1].lower())
        metrics, runner, iters = train_segmentation(args, config, work_dir, ade,
                                                    draw=i == 0)
        seg.append((name, metrics['mIoU'], (time.time() - tic) / 60))
        if i == 0:
            backbone = osp.join(work_dir, 'sola-t_toy-ade_backbone.pth')
            torch.save(runner.model.backbone.state_dict(), backbone)
            pictures = sorted(glob.glob(
                osp.join(runner.log_dir, 'vis_data', 'vis_image', '*.png')))
        del runner
    chance = majority_miou(osp.join(ade, 'annotations', 'validation'))

    banner('[3/3] Mask R-CNN-SoLA-T on toy COCO (backbone from step 2)')
    tic = time.time()
    det_metrics = train_detection(args, coco, backbone)
    det_time = (time.time() - tic) / 60

    banner('Results')
    print(f'toy ADE20K val mIoU after {iters} iterations (always predicting the '
          f'most frequent class: {chance:.2f})')
    for name, miou, minutes in seg:
        print(f'  {name:22} mIoU {miou:6.2f}   ({minutes:.1f} min)')
    print(f'  predictions of {seg[0][0]}: '
          f'{osp.dirname(pictures[0]) if pictures else "none"} '
          f'({len(pictures)} pictures)')
    print(f'Mask R-CNN-SoLA-T toy COCO val   box AP   '
          f'{100 * det_metrics.get("coco/bbox_mAP", 0.):6.2f}   mask AP '
          f'{100 * det_metrics.get("coco/segm_mAP", 0.):6.2f}   '
          f'({det_time:.1f} min)')
    print(f'time: total {(time.time() - start) / 60:.1f} min', flush=True)
    if seg[0][1] < 2 * chance:
        print('mIoU is not clearly above chance: something is wrong',
              file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
