# SoLA-T with bidirectional Gated DeltaNet ('G') in place of every WKV
# layer ('L'): the same widths, softmax layers and HSB setting (arch 't-gdn').
_base_ = ['./mask-rcnn_sola-t_fpn_1x_coco.py']

model = dict(backbone=dict(arch='t-gdn'))
