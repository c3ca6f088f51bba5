# HAViT-DeiT-S: DeiT-Small (width 384) with historical attention in all 12 layers
_base_ = ['./_base_/havit_in1k.py']

model = dict(backbone=dict(arch='deit-s'), head=dict(in_channels=384))
