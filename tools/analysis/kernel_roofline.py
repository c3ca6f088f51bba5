"""Estimated roofline of the Triton kernels on A100 and H100, from their compiled code.

No GPU is needed: every launch of an op (forward + backward) at SoLA / ELFATT /
InfViT stage shapes is recorded from its wrapper and compiled for sm_80 and sm_90
(:mod:`tools.analysis.compile_check`). Per kernel, the larger of two **estimated**
times: bandwidth-bound, the bytes of the distinct tensors the compiled code reads
(PTX ``ld.param``), each read or written once, over HBM bandwidth; issue-bound,
static SASS instructions per tile (``cuobjdump -sass``; includes code a warp
skips, so it leans high) x tiles x warps, over SMs x 4 schedulers x clock.
Beside the op's sum: the single-pass minimum (inputs read, outputs written once)
and a bf16 C x C linear layer on the same tokens (3 GEMMs at the larger of
tensor-core peak and its own traffic). Nothing here is measured.
"""
import argparse
import math
import os
import sys

import torch

from tools.analysis import compile_check
from tools.results import write_csv

GPUS = {'A100': (2.0e12, 108, 1.41e9, 312e12),  # HBM B/s, SMs, clock, bf16 FLOP/s
        'H100': (3.35e12, 132, 1.755e9, 989e12)}
# (op, dtype, shape, label): SoLA-B stages at 1024^2 and 2048^2 (WKV, (B, T, C)),
# Swin-ELFATT-T stages at 1024^2 (EFFATT, (B, heads, N, 32)), InfViT-linear-b at
# 1024^2 (Linear InfSA, (B, 48, 4096, 16))
SHAPES = [
    ('bi_wkv', torch.bfloat16, (1, 256 * 256, 128), 'SoLA-B s1 1024^2'),
    ('bi_wkv', torch.bfloat16, (1, 128 * 128, 256), 'SoLA-B s2 1024^2'),
    ('bi_wkv', torch.bfloat16, (1, 64 * 64, 512), 'SoLA-B s3 1024^2'),
    ('bi_wkv', torch.bfloat16, (1, 512 * 512, 128), 'SoLA-B s1 2048^2'),
    ('bi_wkv', torch.float32, (1, 256 * 256, 128), 'SoLA-B s1 1024^2'),
    ('effatt', torch.bfloat16, (1, 3, 256 * 256, 32), 'ELFATT-T s1 1024^2'),
    ('effatt', torch.bfloat16, (1, 12, 64 * 64, 32), 'ELFATT-T s3 1024^2'),
    ('effatt', torch.float32, (1, 3, 256 * 256, 32), 'ELFATT-T s1 1024^2'),
    ('linear_infsa', torch.bfloat16, (1, 48, 64 * 64, 16), 'InfViT-linear-b'),
]
# single-pass minimum of forward + backward, in tensors of the op's shape read or
# written once
IO_TENSORS = {'bi_wkv': 3 + 5,  # fwd: k, v -> y; bwd: k, v, dy -> dk, dv
              'effatt': 4 + 7,  # fwd: q, k, v -> o; bwd: q, k, v, do -> dq, dk, dv
              'linear_infsa': 3 + 6}  # EFFATT's less o and do: those are (B, H, 1, dv)


def tensor_bytes(launch, used_args):
    """Bytes of the distinct tensors among the arguments the compiled code reads."""
    tensors = {a.data_ptr(): a for name, a in zip(launch.kernel.arg_names, launch.args)
               if isinstance(a, torch.Tensor) and name in used_args}
    return sum(a.numel() * a.element_size() for a in tensors.values())


def tiles(launch):
    """Programs x loop trips: the number of times the kernel body runs."""
    names = launch.kernel.arg_names
    args = dict(zip(names, launch.args), **launch.kwargs)
    programs = math.prod(launch.grid)
    if 'rows_per_program' in args:  # token-tiled: BLOCK_N rows per trip
        return programs * -(-args['rows_per_program'] // args['BLOCK_N'])
    if 'NT' in args and 'BLOCK_N' in args:  # carry scan: blocks of BLOCK_N tiles
        return programs * -(-args['NT'] // args['BLOCK_N'])
    return programs


def rows_for(op, dtype, shape, label):
    launches = compile_check.op_launches(op, dtype, shape)
    tokens = shape[1] if op == 'bi_wkv' else shape[2]
    C = shape[2] if op == 'bi_wkv' else shape[1] * shape[3]
    out = []
    for gpu, (bandwidth, sms, clock, flops) in GPUS.items():
        total = 0.
        case = dict(gpu=gpu, op=op, dtype=str(dtype).split('.')[-1], stage=label,
                    shape='x'.join(map(str, shape)))
        for launch in launches:
            row = compile_check.compile_launch(launch, gpu)
            bw_s = tensor_bytes(launch, row['used_args']) / bandwidth
            issue_s = row['sass'] * tiles(launch) * row['num_warps'] / (sms * 4 * clock)
            total += max(bw_s, issue_s)
            out.append(dict(case, kernel=launch.name, registers=row['registers'],
                            spill_bytes=row['spill_stores'], shared=row['shared'],
                            sass=row['sass'], tiles=tiles(launch),
                            est_bandwidth_us=bw_s * 1e6, est_issue_us=issue_s * 1e6,
                            bound='issue' if issue_s > bw_s else 'bandwidth'))
        single = IO_TENSORS[op] * math.prod(shape) * dtype.itemsize / bandwidth
        linear = 3 * max(2 * tokens * C * C / flops,  # 3 GEMMs: fwd, 2 bwd
                         (2 * tokens * C + C * C) * 2 / bandwidth)
        out.append(dict(case, kernel='(op, fwd+bwd)', est_total_us=total * 1e6,
                        est_single_pass_us=single * 1e6, est_linear_bf16_us=linear * 1e6,
                        x_single_pass=total / single, x_linear=total / linear))
    return out


COLUMNS = ('gpu', 'op', 'dtype', 'stage', 'kernel', 'registers', 'spill_bytes', 'shared',
           'tiles', 'est_bandwidth_us', 'est_issue_us', 'bound', 'est_total_us',
           'est_single_pass_us', 'est_linear_bf16_us', 'x_single_pass', 'x_linear')


def plot(rows, path):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    ops = [r for r in rows if r['kernel'] == '(op, fwd+bwd)']
    fig, axes = plt.subplots(1, len(GPUS), figsize=(12, 5), sharey=True)
    for ax, gpu in zip(axes, GPUS):
        sel = [r for r in ops if r['gpu'] == gpu]
        labels = [f"{r['op']} {r['dtype']}\n{r['stage']}" for r in sel]
        y = range(len(sel))
        for shift, key, what in ((-0.27, 'est_total_us', 'kernels'),
                                 (0, 'est_single_pass_us', 'single-pass minimum'),
                                 (0.27, 'est_linear_bf16_us', 'bf16 C x C linear')):
            ax.barh([i + shift for i in y], [r[key] for r in sel], 0.27,
                    label=f'{what} (estimated)')
        ax.set_yticks(list(y), labels, fontsize=7)
        ax.set_xscale('log')
        ax.set_xlabel('estimated time, forward + backward (us)')
        ax.set_title(f'{gpu} (estimated, not measured)')
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--out', default='work_dirs/kernel_roofline')
    args = parser.parse_args(argv)
    rows = [r for case in SHAPES for r in rows_for(*case)]
    print('All times are ESTIMATED from compiled code and bytes, not measured.')
    print(' | '.join(COLUMNS))
    for r in rows:
        print(' | '.join(f'{v:.3g}' if isinstance(v, float) else '' if v is None
                         else str(v) for v in map(r.get, COLUMNS)))
    csv_path = write_csv(rows, os.path.join(args.out, 'kernel_roofline.csv'), COLUMNS)
    plot(rows, os.path.join(args.out, 'kernel_roofline.png'))
    print(f'wrote {csv_path}')


if __name__ == '__main__':
    sys.exit(main())
