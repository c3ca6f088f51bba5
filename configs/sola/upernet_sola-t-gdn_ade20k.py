# SoLA-T with bidirectional Gated DeltaNet ('G') in place of every WKV
# layer ('L'): the same widths, softmax layers and HSB setting (arch 't-gdn').
_base_ = ['./upernet_sola-t_ade20k.py']

model = dict(backbone=dict(arch='t-gdn'))
