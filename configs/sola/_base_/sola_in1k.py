# SoLA-Vision ImageNet-1K classification (paper Sec. 5.1, Table 3, Swin
# recipe) with the Hidden State Bridge (Table 6: "SoLA Pattern + HSB"): the
# last stage's map, global average pooling and a linear head. Variants set
# arch, drop path and the head in_channels.
_base_ = ['../../_base_/recipes/in1k_swin_300e.py']

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmhybrid.SoLAVision',
        out_indices=(3, ),
        with_hsb=True,
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
