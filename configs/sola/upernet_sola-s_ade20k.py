_base_ = ['./_base_/upernet_sola_ade20k.py']

model = dict(
    backbone=dict(arch='s', drop_path_rate=0.2),
    decode_head=dict(in_channels=[96, 192, 384, 768]),
    auxiliary_head=dict(in_channels=384))
