# SoLA-B with bidirectional Gated DeltaNet ('G') in place of every WKV
# layer ('L'): the same widths, softmax layers and HSB setting (arch 'b-gdn').
_base_ = ['./mask-rcnn_sola-b_fpn_1x_coco.py']

model = dict(backbone=dict(arch='b-gdn'))

# Gated DeltaNet's decay parameters and per-head output RMSNorm: no weight decay
optim_wrapper = dict(
    paramwise_cfg=dict(
        custom_keys={
            'attn.A_log': dict(decay_mult=0.),
            'attn.dt_bias': dict(decay_mult=0.),
            'attn.o_norm': dict(decay_mult=0.),
        }))
