# UPerNet + SoLA-Vision on ADE20K (paper Sec. 5.2, Table 5). As in the paper's
# main table the Hidden State Bridge is off (Supplement 8.1); the *-hsb_ade20k.py
# variants switch it on (Table 8). Variants set arch, drop path and the head
# in_channels. Fine-tune from your ImageNet-1K weights
# (configs/sola/sola-*_in1k.py) with
#   --cfg-options model.backbone.init_cfg.type=Pretrained \
#                 model.backbone.init_cfg.checkpoint=<in1k checkpoint>
_base_ = ['../../_base_/recipes/upernet_ade20k_160k.py']

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmhybrid.SoLAVision',
        out_indices=(0, 1, 2, 3),
        with_hsb=False,
        with_cp=False))

# per-channel rates get no weight decay: the WKV w (spatial_decay) and u
# (spatial_first) of 'L' layers; Gated DeltaNet's A_log, dt_bias and per-head
# output RMSNorm (not a norm type norm_decay_mult finds) of 'G' layers
optim_wrapper = dict(
    paramwise_cfg=dict(
        custom_keys={
            'attn.spatial_decay': dict(decay_mult=0.),
            'attn.spatial_first': dict(decay_mult=0.),
            'attn.A_log': dict(decay_mult=0.),
            'attn.dt_bias': dict(decay_mult=0.),
            'attn.o_norm': dict(decay_mult=0.),
        }))
