_base_ = ['./_base_/sola_in1k.py']

model = dict(
    backbone=dict(arch='s', drop_path_rate=0.3),
    head=dict(in_channels=768))
