# Linear InfViT-4L-64H (paper's primary model: 53.5M params, 84.7% top-1)
_base_ = ['./_base_/infvit_in1k.py']

model = dict(backbone=dict(arch='linear-4l'), head=dict(in_channels=1024))
