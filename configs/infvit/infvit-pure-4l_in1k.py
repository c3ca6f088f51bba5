# Pure InfViT-4L-16H (paper: 57.7M params, 85.1% top-1)
_base_ = ['./_base_/infvit_in1k.py']

model = dict(backbone=dict(arch='pure-4l'), head=dict(in_channels=1024))
