# UPerNet + Pure InfViT-B (12 layers, ViT-B width): layers 3, 6, 9, 12
_base_ = ['./_base_/upernet_infvit_ade20k.py']

model = dict(
    backbone=dict(arch='pure-b', out_indices=(2, 5, 8, 11)),
    neck=dict(in_channels=[768] * 4, out_channels=768),
    decode_head=dict(in_channels=[768] * 4),
    auxiliary_head=dict(in_channels=768))
