"""Save PNGs of a backbone's stage feature maps and effective receptive fields.

The backbone is ``model.backbone`` of an mmseg/mmdet/mmpretrain CONFIG, or a
registered name (``mmhybrid`` models by their plain name, others as
``scope.Name``). Images are ``--image`` paths, or ``--num-images`` generated
scenes (the toy-data painter), resized to ``--size``.

Writes to ``--out``: ``features.png`` (per image, the input and the L2 norm over
channels of every output, normalised per panel) and ``erf.png`` / ``erf.npy``: the
effective receptive field of every output as RepLKNet measures it, the gradient
of ``sum_c relu(y_c)`` at the centre of the output map with respect to the
image, positive part summed over colours and averaged over images (the PNG shows
``log10(1 + erf)`` scaled to [0, 1]).
"""
import argparse
import os
import os.path as osp

import cv2
import matplotlib
import numpy as np
import torch
from mmengine.config import Config, DictAction

import mmhybrid  # noqa: F401  registers our models
from mmhybrid.models.backbones import BaseBackbone
from mmhybrid.models.utils import load_pretrained
from mmhybrid.registry import MODELS
from mmhybrid.utils import load_model_checkpoint
from tools.toy_data import draw_scene

matplotlib.use('Agg')  # files only, no display
from matplotlib import pyplot as plt  # noqa: E402

IMAGENET_MEAN = (123.675, 116.28, 103.53)
IMAGENET_STD = (58.395, 57.12, 57.375)


def build_backbone(config=None, backbone=None, arch=None, options=None,
                   checkpoint=None):
    """(backbone in eval mode, mean, std) of a config or a registered name."""
    mean, std = IMAGENET_MEAN, IMAGENET_STD
    if config is not None:
        cfg = Config.fromfile(config)
        model_cfg = dict(cfg.model.backbone)
        preprocessor = cfg.model.get('data_preprocessor') or {}
        mean, std = preprocessor.get('mean', mean), preprocessor.get('std', std)
        model_cfg.setdefault('_scope_', cfg.get('default_scope'))
    else:
        model_cfg = dict(type=backbone)
        if arch is not None:
            model_cfg['arch'] = arch
    model_cfg.update(options or {})
    model_cfg.pop('init_cfg', None)
    model_cfg.pop('pretrained', None)
    model = MODELS.build(model_cfg)
    if checkpoint is not None:
        if isinstance(model, BaseBackbone):
            load_pretrained(model, checkpoint)
        else:
            load_model_checkpoint(model, checkpoint,
                                  revise_keys=[(r'^backbone\.', '')])
    model.eval()
    return model, tuple(mean), tuple(std)


def load_images(paths=(), num=4, size=(224, 224), seed=0):
    """RGB uint8 images of ``size`` (h, w): ``paths`` or ``num`` painted scenes."""
    images = []
    for path in paths:
        image = cv2.imread(path)
        if image is None:
            raise FileNotFoundError(f'cannot read image {path}')
        images.append(image)
    rng = np.random.default_rng(seed)
    while not paths and len(images) < num:
        images.append(draw_scene(*size, rng)[0])
    return [cv2.resize(img, size[::-1], interpolation=cv2.INTER_LINEAR)[..., ::-1]
            for img in images]


def outputs_and_erfs(model, batch):
    """The backbone's outputs, (B, C, h, w) maps, and the (H, W) ERF of each,
    averaged over the batch."""
    x = batch.clone().requires_grad_(True)
    outputs = model(x)
    outputs = (outputs, ) if isinstance(outputs, torch.Tensor) else tuple(outputs)
    erfs = []
    for i, out in enumerate(outputs):
        centre = out[:, :, out.shape[2] // 2, out.shape[3] // 2].relu().sum()
        grad, = torch.autograd.grad(centre, x, retain_graph=i < len(outputs) - 1)
        erfs.append((grad.relu().sum(1).mean(0)).numpy())
    return [out.detach() for out in outputs], erfs


def _normalised(a):
    a = a - a.min()
    return a / a.max() if a.max() > 0 else a


def save_feature_maps(images, outputs, path):
    rows, cols = len(images), len(outputs) + 1
    fig, axes = plt.subplots(rows, cols, figsize=(2.2 * cols, 2.2 * rows),
                             squeeze=False)
    for r, image in enumerate(images):
        axes[r, 0].imshow(image)
        axes[r, 0].set_title('input' if r == 0 else '', fontsize=8)
        for c, out in enumerate(outputs, 1):
            axes[r, c].imshow(_normalised(out[r].norm(dim=0).numpy()), cmap='viridis')
            if r == 0:
                axes[r, c].set_title(f'out {c - 1}: {tuple(out.shape[1:])}', fontsize=8)
    _save(fig, axes, path)


def save_erfs(erfs, path):
    fig, axes = plt.subplots(1, len(erfs), figsize=(3 * len(erfs), 3), squeeze=False)
    for i, (ax, erf) in enumerate(zip(axes[0], erfs)):
        ax.imshow(_normalised(np.log10(1 + erf)), cmap='RdYlGn', vmin=0, vmax=1)
        ax.set_title(f'ERF of output {i}', fontsize=9)
    _save(fig, axes, path)


def _save(fig, axes, path):
    for ax in axes.flat:
        ax.axis('off')
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('config', nargs='?', help='mmseg/mmdet/mmpretrain config')
    parser.add_argument('--backbone', help='registered backbone instead of a config')
    parser.add_argument('--arch', help='arch of --backbone')
    parser.add_argument('--options', nargs='+', action=DictAction, default={},
                        help='backbone arguments, e.g. out_indices=0,1,2,3')
    parser.add_argument('--checkpoint', help='backbone or full model checkpoint; '
                        'trusted://PATH for your own file holding Python objects '
                        "(mmengine's CheckpointHook writes such files)")
    parser.add_argument('--image', nargs='+', default=[], help='image files')
    parser.add_argument('--num-images', type=int, default=4, help='without --image')
    parser.add_argument('--size', type=int, nargs='+', default=[224], help='input H [W]')
    parser.add_argument('--out', default='work_dirs/visualize_features')
    args = parser.parse_args(argv)
    if (args.config is None) == (args.backbone is None):
        parser.error('give a CONFIG or --backbone NAME')
    size = tuple((args.size * 2)[:2])
    model, mean, std = build_backbone(args.config, args.backbone, args.arch,
                                      args.options, args.checkpoint)
    images = load_images(args.image, args.num_images, size)
    batch = torch.from_numpy(np.stack(images).astype(np.float32)).permute(0, 3, 1, 2)
    batch = (batch - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)
    outputs, erfs = outputs_and_erfs(model, batch)
    os.makedirs(args.out, exist_ok=True)
    save_feature_maps(images[:4], outputs, osp.join(args.out, 'features.png'))
    save_erfs(erfs, osp.join(args.out, 'erf.png'))
    np.save(osp.join(args.out, 'erf.npy'), np.stack(erfs))
    print(f'saved features.png, erf.png and erf.npy to {args.out}')
    return erfs


if __name__ == '__main__':
    main()
