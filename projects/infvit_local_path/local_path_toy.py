"""Does Linear InfViT need a local path for dense prediction? A toy segmentation test.

Images hold 2-4 random rectangles of two classes on a background; every patch's
colour is drowned in strong per-patch noise, so a token can only be labelled
reliably by pooling its neighbourhood. Linear InfSA gives every token the same
context per head (a broadcast), so without a local path a token sees only itself
(+ the global context); the ``lepe`` option adds a 3x3 depth-wise conv of V. Tiny
InfViTs (width 64, 4 layers, patch 4, 32x32 images -> 8x8 tokens) with a linear
per-token classifier are trained with Adam on fresh samples and scored on a fixed
held-out set (token accuracy and mIoU over the three classes).

    python projects/infvit_local_path/local_path_toy.py [--steps 300] [--seeds 0 1]
"""
import argparse
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from mmhybrid.models.backbones import InfViT
from tools.results import write_csv

CLASSES = 3
COLOURS = torch.tensor([[0., 0., 0.], [1., 0.2, 0.], [0., 0.2, 1.]])
VARIANTS = {
    'linear': dict(attn_types='L', local_path=None),
    'linear+lepe': dict(attn_types='L', local_path='lepe'),
    'pure': dict(attn_types='P', local_path=None),
    'softmax': dict(attn_types='S', local_path=None),
}


def make_batch(n, size=32, patch=4, noise=1.0, generator=None):
    """Images (n, 3, size, size) and per-patch labels (n, size/patch, size/patch)."""
    grid = size // patch
    labels = torch.zeros(n, grid, grid, dtype=torch.long)
    for i in range(n):
        for _ in range(int(torch.randint(2, 5, (1, ), generator=generator))):
            h, w = torch.randint(2, 5, (2, ), generator=generator).tolist()
            y = int(torch.randint(0, grid - h + 1, (1, ), generator=generator))
            x = int(torch.randint(0, grid - w + 1, (1, ), generator=generator))
            labels[i, y:y + h, x:x + w] = int(torch.randint(1, CLASSES, (1, ), generator=generator))
    colour = COLOURS[labels].permute(0, 3, 1, 2)  # (n, 3, grid, grid)
    colour = colour + noise * torch.randn(colour.shape, generator=generator)
    images = colour.repeat_interleave(patch, 2).repeat_interleave(patch, 3)
    return images, labels


class ToySegmenter(nn.Module):

    def __init__(self, attn_types, local_path):
        super().__init__()
        self.backbone = InfViT(
            arch=dict(embed_dims=64, depth=4, num_heads=8, mlp_ratio=2.,
                      attn_types=attn_types),
            img_size=32, patch_size=4, local_path=local_path,
            drop_path_rate=0.)
        self.backbone.init_weights()
        self.head = nn.Conv2d(64, CLASSES, 1)

    def forward(self, x):
        return self.head(self.backbone(x)[-1])


def miou(pred, labels):
    ious = [((pred == c) & (labels == c)).sum().item() / union for c in range(CLASSES)
            if (union := ((pred == c) | (labels == c)).sum().item())]
    return sum(ious) / len(ious)


def run(name, cfg, seed, steps, batch, test):
    torch.manual_seed(seed)
    model = ToySegmenter(**cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    gen = torch.Generator().manual_seed(1000 + seed)
    start = time.perf_counter()
    for _ in range(steps):
        images, labels = make_batch(batch, generator=gen)
        loss = F.cross_entropy(model(images), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        pred = model(test[0]).argmax(1)
    return dict(variant=name, seed=seed, steps=steps,
                acc=(pred == test[1]).float().mean().item(),
                miou=miou(pred, test[1]), train_s=time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--steps', type=int, default=300)
    parser.add_argument('--batch', type=int, default=16)
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1])
    parser.add_argument('--variants', nargs='+', default=list(VARIANTS))
    parser.add_argument('--out', default='work_dirs/infvit_local_path_toy')
    args = parser.parse_args()
    test = make_batch(256, generator=torch.Generator().manual_seed(12345))
    rows = []
    for name in args.variants:
        for seed in args.seeds:
            rows.append(r := run(name, VARIANTS[name], seed, args.steps, args.batch, test))
            print(f"{name:12s} seed {seed}: acc {r['acc']:.3f} mIoU {r['miou']:.3f} "
                  f"({r['train_s']:.0f}s)", flush=True)
    print('\n| variant | token acc | mIoU | seeds |\n|---|---|---|---|')
    for name in args.variants:
        sel = [r for r in rows if r['variant'] == name]
        print(f'| {name} | ' + ' | '.join(f'{sum(r[k] for r in sel) / len(sel):.3f}'
                                          for k in ('acc', 'miou')) + f' | {len(sel)} |')
    write_csv(rows, os.path.join(args.out, 'results.csv'))
    print(f'wrote {args.out}/results.csv')


if __name__ == '__main__':
    main()
