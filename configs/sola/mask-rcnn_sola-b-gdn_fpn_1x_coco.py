# SoLA-B with bidirectional Gated DeltaNet ('G') in place of every WKV
# layer ('L'): the same widths, softmax layers and HSB setting (arch 'b-gdn').
_base_ = ['./mask-rcnn_sola-b_fpn_1x_coco.py']

model = dict(backbone=dict(arch='b-gdn'))
