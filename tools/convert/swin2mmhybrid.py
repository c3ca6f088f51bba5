"""Convert an official Swin ImageNet checkpoint (microsoft/Swin-Transformer) for mmhybrid.

The output loads into ``SwinELFATT(attn='local')`` exactly and into the ELFATT / GLOBAL /
EFFATT variants for every tensor they share (see docs/elfatt.md):

    python tools/convert/swin2mmhybrid.py swin_official.pth swin_mmhybrid.pth
"""
import argparse

from mmhybrid.models.utils import convert_swin, convert_checkpoint_file


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('src', help='official checkpoint (.pth)')
    parser.add_argument('dst', help='output checkpoint (.pth)')
    args = parser.parse_args()
    state_dict = convert_checkpoint_file(args.src, args.dst, convert_swin)
    print(f'wrote {len(state_dict)} tensors to {args.dst}')


if __name__ == '__main__':
    main()
