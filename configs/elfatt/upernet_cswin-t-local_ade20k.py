_base_ = ['./_base_/upernet_elfatt_ade20k.py']

model = dict(
    backbone=dict(
        type='mmhybrid.CSWin', arch='t', attn='local', drop_path_rate=0.3),
    decode_head=dict(in_channels=[64, 128, 256, 512]),
    auxiliary_head=dict(in_channels=256))
