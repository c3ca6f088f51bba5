_base_ = ['./_base_/sola_in1k.py']

model = dict(
    backbone=dict(arch='t', drop_path_rate=0.1),
    head=dict(in_channels=256))
