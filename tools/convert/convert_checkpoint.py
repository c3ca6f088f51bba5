"""Convert a public ImageNet checkpoint into an mmhybrid one (any known layout).

``init_cfg=dict(type='Pretrained', checkpoint=...)`` reads these files as they
are; this tool is for users who want a converted file (an mmpretrain
``ImageClassifier`` checkpoint: ``backbone.*`` in our layout, the linear
classifier as ``head.fc.*``). The layout is detected from the keys (see
docs/weights.md); the model, from a config's ``model.backbone`` or a backbone
type with its arguments, decides what the weights become:

    python tools/convert/convert_checkpoint.py deit_tiny_patch16_224.pth \
        deit-t_havit.pth --model HAViT --options arch=deit-t history=None
    python tools/convert/convert_checkpoint.py swin_tiny_patch4_window7_224.pth \
        swin-t_mmhybrid.pth --model configs/elfatt/upernet_swin-t-local_ade20k.py

It prints the load report of the source file into the model (refusing one that
fills less than half of it) and the detected format.
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
    parser.add_argument(
        '--model', required=True,
        help='a config file (its model.backbone is used) or a backbone type, '
        'e.g. HAViT, InfViT, SwinELFATT, CSWin')
    parser.add_argument(
        '--options', nargs='+', action=DictAction, default={},
        help='backbone arguments, e.g. arch=deit-t attn=local (numbers, strings, '
        'lists; with a config: overrides of model.backbone; an arch dict goes '
        'in a config)')
    return parser.parse_args()


def build_backbone(model, options):
    if osp.isfile(model):
        cfg = dict(Config.fromfile(model).model.backbone)
        cfg.pop('init_cfg', None)
        cfg.pop('pretrained', None)
    else:
        cfg = dict(type=model)
    cfg.update(options)
    cfg['type'] = cfg['type'].split('.')[-1]  # 'mmhybrid.X' -> 'X'
    return build_model(cfg)


def main():
    args = parse_args()
    backbone = build_backbone(args.model, args.options)
    try:  # what init_cfg would load from the file as it is, refused if little
        load_pretrained(backbone, args.src, pos_embed_keys=backbone.pos_embed_keys,
                        num_extra_tokens=backbone.num_extra_tokens)
    except ValueError as err:  # with the fix in the message
        raise SystemExit(f'{args.src}: {err}')
    state_dict, fmt = convert_checkpoint_file(args.src, args.dst, backbone)
    layout = f'{fmt.name} format ({fmt.source})' if fmt else 'mmhybrid layout'
    print(f'{args.src}: {layout}; wrote {len(state_dict)} tensors to {args.dst}')


if __name__ == '__main__':
    main()
