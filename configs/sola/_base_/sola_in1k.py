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
