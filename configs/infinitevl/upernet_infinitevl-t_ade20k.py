_base_ = ['./_base_/upernet_infinitevl_ade20k.py']

model = dict(
    backbone=dict(arch='t', drop_path_rate=0.1),
    decode_head=dict(in_channels=[96, 128, 192, 256]),
    auxiliary_head=dict(in_channels=192))
