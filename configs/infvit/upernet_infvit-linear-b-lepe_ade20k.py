# UPerNet + Linear InfViT-B with the local path (3x3 depth-wise conv of V, LePE)
# added to every layer: linear InfSA alone broadcasts one context per head.
_base_ = ['./upernet_infvit-linear-b_ade20k.py']

model = dict(backbone=dict(local_path='lepe'))
