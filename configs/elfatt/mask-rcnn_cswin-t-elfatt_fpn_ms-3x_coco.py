_base_ = ['./_base_/mask-rcnn_elfatt_fpn_ms-3x_coco.py']

model = dict(
    backbone=dict(
        type='mmhybrid.CSWin', arch='t', attn='elfatt', drop_path_rate=0.2),
    neck=dict(in_channels=[64, 128, 256, 512]))
