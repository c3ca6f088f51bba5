_base_ = ['./_base_/upernet_elfatt_ade20k.py']

model = dict(
    backbone=dict(
        type='mmhybrid.CSWin', arch='b', attn='elfatt', drop_path_rate=0.5),
    decode_head=dict(in_channels=[96, 192, 384, 768]),
    auxiliary_head=dict(in_channels=384))
