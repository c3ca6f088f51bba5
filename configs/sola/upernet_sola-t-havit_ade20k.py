# UPerNet-SoLA-T with historical attention (HAViT, alpha 0.45, random H_0) in its
# softmax layers: the two 'S' layers of stage 3 share one history, stage 4's
# starts anew (docs/design.md, "Historical attention (HAViT)").
_base_ = ['./upernet_sola-t_ade20k.py']

model = dict(backbone=dict(history=dict(alpha=0.45, init='random')))
