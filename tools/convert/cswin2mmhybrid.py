"""Convert an official CSWin ImageNet checkpoint (microsoft/CSWin-Transformer) for mmhybrid.

The output loads into ``CSWin(attn='local')`` exactly and into the ELFATT / GLOBAL /
EFFATT variants for every tensor they share (see docs/elfatt.md):

    python tools/convert/cswin2mmhybrid.py cswin_official.pth cswin_mmhybrid.pth
"""
import argparse

from mmhybrid.models.utils import convert_cswin, convert_checkpoint_file


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('src', help='official checkpoint (.pth)')
    parser.add_argument('dst', help='output checkpoint (.pth)')
    args = parser.parse_args()
    state_dict = convert_checkpoint_file(args.src, args.dst, convert_cswin)
    print(f'wrote {len(state_dict)} tensors to {args.dst}')


if __name__ == '__main__':
    main()
