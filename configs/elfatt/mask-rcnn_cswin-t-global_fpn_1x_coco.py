_base_ = ['./_base_/mask-rcnn_elfatt_fpn_1x_coco.py']

model = dict(
    backbone=dict(
        type='mmhybrid.CSWin', arch='t', attn='global', drop_path_rate=0.2),
    neck=dict(in_channels=[64, 128, 256, 512]))
