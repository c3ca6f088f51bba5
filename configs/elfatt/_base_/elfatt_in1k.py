# ImageNet-1K classification of the ELFATT backbones (Table 1): the last
# stage's map, global average pooling and a linear head, trained from scratch
# for 300 epochs with the shared Swin recipe (the paper follows CSWin's,
# which also uses AdamW, 300 epochs, RandAugment, Mixup/CutMix and label
# smoothing). Variants set the backbone class, arch, attention plan, drop
# path and the head in_channels.
_base_ = ['../../_base_/recipes/in1k_swin_300e.py']

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmhybrid.CSWin',
        arch='t',
        attn='elfatt',
        out_indices=(3, ),
        with_cp=False))

optim_wrapper = dict(
    paramwise_cfg=dict(
        custom_keys={'relative_position_bias_table': dict(decay_mult=0.)}))
