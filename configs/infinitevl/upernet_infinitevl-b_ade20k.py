_base_ = ['./_base_/upernet_infinitevl_ade20k.py']

model = dict(
    backbone=dict(arch='b', drop_path_rate=0.3),
    decode_head=dict(in_channels=[128, 256, 512, 1024]),
    auxiliary_head=dict(in_channels=512))
