_base_ = ['./_base_/elfatt_in1k.py']

model = dict(
    backbone=dict(
        type='mmhybrid.CSWin', arch='t', attn='elfatt', drop_path_rate=0.2),
    head=dict(in_channels=512))
