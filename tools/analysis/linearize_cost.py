"""Estimated cost of linearizing Swin-T into SoLA-S on ImageNet-1k (issue 36).

    PYTHONPATH=$PWD python tools/analysis/linearize_cost.py [--size 224 512] [--mfu 0.4]

Counted, per image, from the real models of ``configs/linearize/sola-s_swin-t_stage
{1,2}.py`` (random weights): multiply-adds of each pass (``tools/analysis/flops``,
fvcore convention), and the WKV scans each pass runs (tokens x channels per layer).
Stage I runs the frozen teacher and every student layer on its teacher layer's
input; Stage II the teacher and the whole student with its classifier head; a
300-epoch pretraining the student and head alone.

Assumed, and printed with the table: a backward pass costs ``BACKWARD`` x its
forward's multiply-adds (weight and input gradients) in the modules that train, and
nothing elsewhere (Stage I: the inputs are the teacher's activations, taken under
``no_grad``, so no gradient leaves a layer); the tensor-core work (matmuls,
convolutions, softmax attention) runs at ``--mfu`` of the GPU's bf16 peak, which
also has to cover norms and element-wise ops; each WKV scan takes the time
``tools/analysis/kernel_roofline.py`` estimates for our Triton kernels at the
layer's shape and the config's batch per GPU (forward kernels only where no
gradient is needed). GPU-hours assume perfect scaling over GPUs and no data-loading
stall. Nothing here is measured: ``tools/benchmarks/run.py --suite linearize``
measures it on a GPU.
"""
import argparse
import os.path as osp

import torch
from mmengine.config import Config

from tools.analysis.flops import count_flops
from tools.analysis.kernel_roofline import GPUS, rows_for

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIGS = {stage: osp.join(REPO, f'configs/linearize/sola-s_swin-t_stage{stage}.py')
           for stage in (1, 2)}
IMAGENET = 1281167  # ImageNet-1k training images
PRETRAIN_EPOCHS = 300  # configs/sola/sola-*_in1k.py
BACKWARD = 2  # backward multiply-adds per forward multiply-add of a trained module
TENSOR_KINDS = ('matmul', 'conv', 'attention')


def build(config):
    from mmhybrid.registry import build_model
    return build_model(Config.fromfile(config).model).eval()


def trained_modules(model):
    """Names of the outermost modules whose parameters all train."""
    names = [n for n, m in model.named_modules() if n and any(
        True for _ in m.parameters()) and all(p.requires_grad for p in m.parameters())]
    return [n for n in names if not any(n.startswith(o + '.') for o in names)]


def wkv_shapes(model, x, **kwargs):
    """``{module name: (tokens, channels)}`` of every WKV mixer ``model`` runs."""
    from mmhybrid.layers.mixers.wkv import SpatialMix
    shapes, handles = {}, []

    def record(name):
        def hook(module, args):
            shapes[name] = tuple(args[0].shape[1:])
        return hook

    for name, m in model.named_modules():
        if isinstance(m, SpatialMix):
            handles.append(m.register_forward_pre_hook(record(name)))
    with torch.no_grad():
        model(x, **kwargs)
    for h in handles:
        h.remove()
    return shapes


def wkv_seconds(tokens, channels, batch):
    """``{gpu: (forward s, forward + backward s)}`` per image of one WKV scan, bf16,
    from the roofline's estimated kernel times at ``batch`` images."""
    rows = rows_for('bi_wkv', torch.bfloat16, (batch, tokens, channels), '')
    out = {}
    for gpu in GPUS:
        kernels = [r for r in rows if r['gpu'] == gpu and r['kernel'] != '(op, fwd+bwd)']
        last_forward = [r['kernel'] for r in kernels].index('_forward_kernel')
        forward = sum(max(r['est_bandwidth_us'], r['est_issue_us'])
                      for r in kernels[:last_forward + 1])
        total = sum(max(r['est_bandwidth_us'], r['est_issue_us']) for r in kernels)
        out[gpu] = (1e-6 * forward / batch, 1e-6 * total / batch)
    return out


def tensor_macs(flops, prefixes):
    return sum(flops.by_kind(p)[k] for p in prefixes for k in TENSOR_KINDS)


def stage_costs(size, batch):
    """``[(stage, forward MACs, backward MACs, {gpu: WKV s})]`` per image."""
    x = torch.randn(1, 3, size, size)
    costs, wkv_cache = [], {}

    def wkv(shapes, backward):
        total = dict.fromkeys(GPUS, 0.)
        for name, shape in shapes.items():
            if shape not in wkv_cache:
                wkv_cache[shape] = wkv_seconds(*shape, batch)
            for gpu, (fwd, fwd_bwd) in wkv_cache[shape].items():
                total[gpu] += fwd_bwd if backward(name) else fwd
        return total

    # Stage I: teacher + student layers forward, backward of the trained parts
    model = build(CONFIGS[1])
    flops = count_flops(model, x, mode='loss')
    trained = trained_modules(model)

    def trains(name):
        return any(name == t or name.startswith(t + '.') for t in trained)

    costs.append(('Stage I (layer-wise)', tensor_macs(flops, ['']),
                  BACKWARD * tensor_macs(flops, trained),
                  wkv(wkv_shapes(model, x, mode='loss'), trains)))
    # Stage II: teacher + whole student (and heads) forward, student backward
    model = build(CONFIGS[2])
    flops = count_flops(model, x, mode='loss')
    student = tensor_macs(flops, ['backbone', 'head'])
    shapes = wkv_shapes(model, x, mode='loss')
    costs.append(('Stage II (end to end)', tensor_macs(flops, ['']), BACKWARD * student,
                  wkv(shapes, lambda name: True)))
    costs.append(('pretraining (student alone)', student, BACKWARD * student,
                  wkv(shapes, lambda name: True)))
    return costs, {p: tensor_macs(flops, [p]) for p in ('teacher', 'backbone', 'head')}


def images_per_stage():
    """Images of the configs' budgets (iterations x the batch their lrs are set for)
    and of a 300-epoch pretraining."""
    images = []
    for stage in (1, 2):
        cfg = Config.fromfile(CONFIGS[stage])
        images.append(cfg.train_cfg.max_iters * cfg.auto_scale_lr.base_batch_size)
    return images + [PRETRAIN_EPOCHS * IMAGENET], cfg.train_dataloader.batch_size


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--size', type=int, nargs='+', default=[224])
    parser.add_argument('--mfu', type=float, nargs='+', default=[0.4],
                        help='assumed shares of the bf16 tensor-core peak (default 0.4)')
    args = parser.parse_args(argv)
    images, batch = images_per_stage()
    gpus = list(GPUS)
    print(f'ESTIMATED, not measured. Per image: tensor-core MACs x 2 / (bf16 peak x an '
          'assumed utilisation) + WKV scans at the kernel roofline\'s estimated time '
          f'(batch {batch} per GPU); backward = {BACKWARD}x the forward MACs of the '
          'trained modules (assumed); perfect scaling over GPUs. bf16 peak: '
          + ', '.join(f'{g} {GPUS[g][3] / 1e12:.0f} TFLOP/s' for g in gpus) + '.')
    for size in args.size:
        costs, parts = stage_costs(size, batch)
        print(f'\n{size}x{size}, per image (counted): Swin-T forward '
              f'{parts["teacher"] / 1e9:.2f} GMACs, SoLA-S forward '
              f'{parts["backbone"] / 1e9:.2f} + head {parts["head"] / 1e9:.4f} '
              '(tensor-core kinds; the WKV scans apart)')
        for mfu in args.mfu:
            print(f'\n{size}x{size}, {mfu:.0%} utilisation (assumed)\n')
            head = (['stage', 'GMACs fwd / bwd'] +
                    [f'WKV ms/img {g}' for g in gpus] + [f'img/s {g}' for g in gpus] +
                    ['images'] + [f'GPU-h {g}' for g in gpus] +
                    ['vs pretraining A100 / H100'])
            print('| ' + ' | '.join(head) + ' |\n|' + '---|' * len(head))
            seconds = [{g: 2 * (fwd + bwd) / (GPUS[g][3] * mfu) + wkv[g] for g in gpus}
                       for _, fwd, bwd, wkv in costs]
            for (name, fwd, bwd, wkv), per_image, n in zip(costs, seconds, images):
                print('| ' + ' | '.join(
                    [name, f'{fwd / 1e9:.2f} / {bwd / 1e9:.2f}'] +
                    [f'{1e3 * wkv[g]:.3f}' for g in gpus] +
                    [f'{1 / per_image[g]:,.0f}' for g in gpus] + [f'{n / 1e6:.2f} M'] +
                    [f'{n * per_image[g] / 3600:,.2f}' for g in gpus] +
                    [' / '.join(f'{n * per_image[g] / (images[-1] * seconds[-1][g]):.2%}'
                                for g in gpus)]) + ' |')
        print('\nEvery time, rate and GPU-hour figure above is estimated.')

if __name__ == '__main__':
    main()
