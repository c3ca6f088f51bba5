# UPerNet + Linear InfViT-4L (the paper's 4-layer model, 53.5M as a
# classifier), the local path on: every layer's map feeds the neck
_base_ = ['./_base_/upernet_infvit_ade20k.py']

model = dict(
    backbone=dict(arch='linear-4l', out_indices=(0, 1, 2, 3)),
    neck=dict(in_channels=[1024] * 4, out_channels=1024),
    decode_head=dict(in_channels=[1024] * 4),
    auxiliary_head=dict(in_channels=1024))
