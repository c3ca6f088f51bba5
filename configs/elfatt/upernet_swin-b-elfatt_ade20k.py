_base_ = ['./_base_/upernet_elfatt_ade20k.py']

model = dict(
    backbone=dict(
        type='mmhybrid.SwinELFATT', arch='b', attn='elfatt', drop_path_rate=0.3),
    decode_head=dict(in_channels=[128, 256, 512, 1024]),
    auxiliary_head=dict(in_channels=512))
