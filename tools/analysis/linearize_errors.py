"""Per-layer relative error of a linearized student against its teacher.

Every student layer runs on its teacher layer's input, as in Stage I (InfiniteVL
Sec. 3.3, Eq. 3), and is compared with the teacher layer's output:
``||h_S - h_T||^2 / ||h_T||^2``, on the first images of the config's dataset
(one augmented view each, seeded). Without ``--checkpoint`` the model is as the
config initialises it (the teacher checkpoint, the student's inherited
weights); with it, as a Stage I or II checkpoint left it.

    python tools/analysis/linearize_errors.py configs/linearize/sola-s_swin-t_stage1.py
    python tools/analysis/linearize_errors.py configs/linearize/sola-s_swin-t_stage1.py \\
        --checkpoint work_dirs/sola-s_swin-t_stage1/iter_1250.pth
"""
import argparse

import numpy as np
import torch
from mmengine.config import DictAction
from mmengine.dataset import pseudo_collate
from mmengine.registry import DATASETS, MODELS, init_default_scope

import mmhybrid  # noqa: F401  registers our models
from mmhybrid.models.utils import extract_state_dict
from mmhybrid.utils.checkpoint import load_checkpoint
from tools._common import load_config


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('config', help='a configs/linearize config (either stage)')
    parser.add_argument('--checkpoint', help='a checkpoint of that config')
    parser.add_argument('--images', type=int, default=64, help='images to average over')
    parser.add_argument('--batch-size', type=int, default=16)
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config entries, e.g. data_root=PATH')
    return parser.parse_args(argv)


def build_distiller(cfg, checkpoint=None):
    """The config's distiller in its layer-wise form (pairs, no head), weights
    initialised, then ``checkpoint`` (its classifier heads ignored)."""
    cfg.model.update(stage='layerwise', trainable='all')
    cfg.model.pop('head', None)
    model = MODELS.build(cfg.model)
    model.init_weights()
    if checkpoint:
        state = extract_state_dict(load_checkpoint(checkpoint, map_location='cpu'))
        state = {k: v for k, v in state.items()
                 if not k.startswith(('head.', 'teacher_head.'))}
        missing = model.load_state_dict(state, strict=False).missing_keys
        if missing:
            raise ValueError(f'{checkpoint} lacks {len(missing)} tensors of the '
                             f'distiller, e.g. {missing[:3]}: a checkpoint of '
                             'another config?')
    return model.eval()


def relative_errors(model, dataset, num_images, batch_size):
    """``{(stage, layer): relative MSE}``, the mean over batches."""
    torch.manual_seed(0)
    np.random.seed(0)
    totals, batches = {}, 0
    indices = range(min(num_images, len(dataset)))
    for start in range(0, len(indices), batch_size):
        batch = pseudo_collate([dataset[i] for i in indices[start:start + batch_size]])
        inputs = model.data_preprocessor(batch, False)['inputs']
        for key, error in model.relative_errors(inputs).items():
            totals[key] = totals.get(key, 0.) + error
        batches += 1
    return {key: total / batches for key, total in totals.items()}


def main(argv=None):
    args = parse_args(argv)
    cfg = load_config(args.config, args.cfg_options)
    init_default_scope(cfg.get('default_scope', 'mmengine'))
    torch.manual_seed(0)  # random parts (no checkpoint) reproducible
    model = build_distiller(cfg, args.checkpoint)
    dataset = DATASETS.build(cfg.train_dataloader.dataset)
    errors = relative_errors(model, dataset, args.images, args.batch_size)
    teacher_layer = {(i + 1, j + 1): k + 1 for (i, j), (_, k) in model.pairs}
    print(f'{args.checkpoint or "initial weights"}, '
          f'{min(args.images, len(dataset))} images')
    print('| stage | layer | teacher layer | relative MSE |\n| --- | --- | --- | --- |')
    for (stage, layer), error in errors.items():
        print(f'| {stage} | {layer} | {teacher_layer[stage, layer]} | {error:.4f} |')
    print(f'| mean | | | {sum(errors.values()) / len(errors):.4f} |')
    return errors


if __name__ == '__main__':
    main()
