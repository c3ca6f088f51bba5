"""Convert a public ImageNet checkpoint into an mmhybrid one (any known layout).

``init_cfg=dict(type='Pretrained', checkpoint=...)`` reads those files as they are;
this writes an mmpretrain ``ImageClassifier`` checkpoint (``backbone.*`` in our
layout, a linear classifier as ``head.fc.*``) for the backbone of a config or a
backbone type with arguments, after printing the load report (refused if it
fills less than half of the model). Layouts: docs/weights.md.

    python tools/convert/convert_checkpoint.py deit_tiny_patch16_224.pth \
        deit-t_havit.pth --model HAViT --options arch=deit-t history=None
    python tools/convert/convert_checkpoint.py swin_tiny_patch4_window7_224.pth \
        swin-t_mmhybrid.pth --model configs/elfatt/upernet_swin-t-local_ade20k.py
"""
import argparse
import os.path as osp

from mmengine.config import Config, DictAction

import mmhybrid  # noqa: F401  registers our models
from mmhybrid.models.utils import convert_checkpoint_file, load_pretrained
from mmhybrid.registry import build_model


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('src', help='checkpoint to convert (.pth)')
    parser.add_argument('dst', help='output checkpoint (.pth)')
    parser.add_argument('--model', required=True, help='a config file (its model.backbone '
                        'is used) or a backbone type, e.g. HAViT, InfViT, SwinELFATT, CSWin')
    parser.add_argument('--options', nargs='+', action=DictAction, default={},
                        help='backbone arguments (with a config: overrides of '
                        'model.backbone), e.g. arch=deit-t attn=local')
    return parser.parse_args()


def build_backbone(model, options):
    if osp.isfile(model):
        cfg = dict(Config.fromfile(model).model.backbone)
        cfg.pop('init_cfg', None)
        cfg.pop('pretrained', None)
    else:
        cfg = dict(type=model)
    cfg.update(options)
    return build_model(cfg)


def main():
    args = parse_args()
    backbone = build_backbone(args.model, args.options)
    try:  # what init_cfg would load
        load_pretrained(backbone, args.src)
    except ValueError as err:
        raise SystemExit(f'{args.src}: {err}')
    state_dict, fmt = convert_checkpoint_file(args.src, args.dst, backbone)
    layout = f'{fmt.name} format ({fmt.source})' if fmt else 'mmhybrid layout'
    print(f'{args.src}: {layout}; wrote {len(state_dict)} tensors to {args.dst}')


if __name__ == '__main__':
    main()
