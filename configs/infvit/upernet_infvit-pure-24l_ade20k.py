# UPerNet + Pure InfViT-24L (the paper's 24-layer model), the local path on:
# layers 6, 12, 18, 24 feed the neck
_base_ = ['./_base_/upernet_infvit_ade20k.py']

model = dict(
    backbone=dict(arch='pure-24l', out_indices=(5, 11, 17, 23),
                  drop_path_rate=0.2),
    neck=dict(in_channels=[1024] * 4, out_channels=1024),
    decode_head=dict(in_channels=[1024] * 4),
    auxiliary_head=dict(in_channels=1024))
