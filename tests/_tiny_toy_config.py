"""The toy UPerNet-SoLA config (configs/sola/demo) at test size, as a file that
``tools/train.py`` can run: tiny SoLA widths, 64^2 crops, batch 2, no worker
processes, no dropout (reproducible runs), a short schedule."""
from pathlib import Path

from tools.tiny_backbones import TINY_BACKBONES

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / 'configs/sola/demo/upernet_sola-t_toy-ade.py'
SOLA = TINY_BACKBONES['SoLAVision']
CHANNELS = (16, 16, 32, 32)
assert CHANNELS == SOLA['arch']['embed_dims']

TEMPLATE = '''
_base_ = [{demo!r}]
crop_size = (64, 64)
model = dict(
    data_preprocessor=dict(size=crop_size),
    backbone=dict(arch=dict(_delete_=True, **{arch!r}),
                  head_dim={head_dim}, out_indices={out_indices!r}),
    decode_head=dict(in_channels={decode_channels!r},
                     in_index={decode_index!r}, channels=32, pool_scales=(1, 2),
                     dropout_ratio=0.),
    auxiliary_head=dict(in_channels={aux_channels}, in_index={aux_index},
                        channels=16, dropout_ratio=0.))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='RandomResize', scale=(256, 64), ratio_range=(0.75, 1.5),
         keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(256, 64), keep_ratio=True),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='PackSegInputs'),
]
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
                        dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(num_workers=0, persistent_workers=False,
                      dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
param_scheduler = [dict(type='PolyLR', eta_min=0., power=1.0, begin=0,
                        end={iters}, by_epoch=False)]
train_cfg = dict(max_iters={iters}, val_interval={iters})
default_hooks = dict(logger=dict(interval=1),
                     checkpoint=dict(interval={checkpoint_interval},
                                     max_keep_ckpts=1))
'''


def write_tiny_toy_config(folder, iters, checkpoint_interval=None,
                          out_indices=(0, 1, 2, 3), extra=''):
    """Write the config to ``folder/tiny_toy_ade.py`` and return its path.

    The decode head reads every backbone output, the auxiliary head the last
    one; ``extra`` is appended (e.g. a runner or strategy).
    """
    channels = [CHANNELS[i] for i in out_indices]
    text = TEMPLATE.format(
        demo=str(DEMO), arch=SOLA['arch'], head_dim=SOLA['head_dim'],
        out_indices=tuple(out_indices), decode_channels=channels,
        decode_index=list(range(len(channels))), aux_channels=channels[-1],
        aux_index=len(channels) - 1, iters=iters,
        checkpoint_interval=checkpoint_interval or iters)
    path = Path(folder) / 'tiny_toy_ade.py'
    path.write_text(text + extra)
    return path
