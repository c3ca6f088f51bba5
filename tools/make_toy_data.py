"""Write the toy ADE20K, COCO and ImageNet sets (deterministic) used by the demo.

Layouts are the real ones, so any config reads them with
``--cfg-options data_root=data/toy/ade`` (or ``coco``, ``imagenet``).
"""
import argparse
import os.path as osp

import mmhybrid  # noqa: F401
from tools.toy_data import make_toy_ade20k, make_toy_coco, make_toy_imagenet

MAKERS = {'ade': make_toy_ade20k, 'coco': make_toy_coco, 'imagenet': make_toy_imagenet}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', default='data/toy', help='output folder')
    parser.add_argument('--which', nargs='+', choices=sorted(MAKERS),
                        default=sorted(MAKERS))
    args = parser.parse_args()
    for name in args.which:
        print(f'{name}: {MAKERS[name](osp.join(args.out, name))}')


if __name__ == '__main__':
    main()
