# UPerNet-SoLA-T with historical attention (HAViT) on the toy ADE20K: the demo
# config of SoLA-T (same data, schedule and iterations) with history on.
_base_ = ['./upernet_sola-t_toy-ade.py']

model = dict(backbone=dict(history=dict(alpha=0.45, init='random')))
