# HAViT-DeiT-T: DeiT-Tiny (width 192) with historical attention in all 12 layers
_base_ = ['./_base_/havit_in1k.py']

model = dict(backbone=dict(arch='deit-t'), head=dict(in_channels=192))
