# UPerNet + InfiniteVL-style backbone (Gated DeltaNet + sliding-window
# attention) on ADE20K, with SoLA-Vision's recipe (Sec. 5.2) so the two compare
# directly. Variants set arch, drop path and the head in_channels. Fine-tune
# from your ImageNet-1K weights with
#   --cfg-options model.backbone.init_cfg.type=Pretrained \
#                 model.backbone.init_cfg.checkpoint=<in1k checkpoint>
_base_ = ['../../_base_/recipes/upernet_ade20k_160k.py']

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmhybrid.InfiniteVLVision',
        window_size=7,
        out_indices=(0, 1, 2, 3),
        with_cp=False))

# Gated DeltaNet's decay parameters and per-head output RMSNorm: no weight
# decay (RMSNorm is not among the norm types norm_decay_mult finds)
optim_wrapper = dict(
    paramwise_cfg=dict(
        custom_keys={
            'attn.A_log': dict(decay_mult=0.),
            'attn.dt_bias': dict(decay_mult=0.),
            'attn.o_norm': dict(decay_mult=0.),
        }))
