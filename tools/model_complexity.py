"""Print parameters and FLOPs (multiply-adds, as fvcore/mmengine count) of backbones.

    python tools/model_complexity.py SoLAVision t s b --size 224
    python tools/model_complexity.py CSWin t b

Only matmul/conv-like ops are counted (element-wise work such as the WKV scan or
softmax is not), which is how the papers' tables are usually produced.
"""
import argparse

import torch
from mmengine.analysis import FlopAnalyzer

import mmhybrid  # noqa: F401
from mmhybrid.registry import MODELS


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('backbone', help='registered name, e.g. SoLAVision')
    parser.add_argument('archs', nargs='+')
    parser.add_argument('--size', type=int, nargs='+', default=[224])
    args = parser.parse_args()
    h, w = (args.size * 2)[:2]
    print(f'{"model":24} {"params (M)":>11} {"GFLOPs":>8}  @ {h}x{w}')
    for arch in args.archs:
        model = MODELS.build(dict(type=args.backbone, arch=arch)).eval()
        params = sum(p.numel() for p in model.parameters()) / 1e6
        analyzer = FlopAnalyzer(model, torch.randn(1, 3, h, w))
        analyzer.unsupported_ops_warnings(False)
        analyzer.uncalled_modules_warnings(False)
        print(f'{args.backbone + "-" + arch:24} {params:11.2f} '
              f'{analyzer.total() / 1e9:8.2f}')


if __name__ == '__main__':
    main()
