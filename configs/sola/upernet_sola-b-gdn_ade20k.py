# SoLA-B with bidirectional Gated DeltaNet ('G') in place of every WKV
# layer ('L'): the same widths, softmax layers and HSB setting (arch 'b-gdn').
_base_ = ['./upernet_sola-b_ade20k.py']

model = dict(backbone=dict(arch='b-gdn'))
