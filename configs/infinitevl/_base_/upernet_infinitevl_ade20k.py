# UPerNet + InfiniteVL-style backbone (Gated DeltaNet + sliding-window
# attention) on ADE20K, with SoLA-Vision's recipe (Sec. 5.2) so the two compare
# directly. Variants set arch, drop path and the head in_channels. Fine-tune
# from your ImageNet-1K weights with
#   --cfg-options model.backbone.init_cfg.type=Pretrained \
#                 model.backbone.init_cfg.checkpoint=<in1k checkpoint>
_base_ = ['../../sola/_base_/upernet_sola_ade20k.py']

model = dict(backbone=dict(type='mmhybrid.InfiniteVLVision', window_size=7))
