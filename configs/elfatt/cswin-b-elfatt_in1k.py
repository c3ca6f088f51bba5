_base_ = ['./_base_/elfatt_in1k.py']

model = dict(
    backbone=dict(
        type='mmhybrid.CSWin', arch='b', attn='elfatt', drop_path_rate=0.5),
    head=dict(in_channels=768))
