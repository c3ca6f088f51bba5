# UPerNet on ADE20K, 512x512, 160k iterations (ELFATT Table 2 / Sec. 4: the
# VMamba/Swin recipe, AdamW lr 6e-5, wd 0.01, poly, 1500 warm-up iterations,
# 16 images per iteration). Variants set the backbone class, arch, attention
# plan, drop path and the head in_channels. Fine-tune from your ImageNet-1K
# weights (configs/elfatt/*_in1k.py, or an official Swin/CSWin checkpoint
# converted with tools/convert/) with
#   --cfg-options model.backbone.init_cfg.type=Pretrained \
#                 model.backbone.init_cfg.checkpoint=<checkpoint>
_base_ = ['../../_base_/recipes/upernet_ade20k_160k.py']

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmhybrid.CSWin',
        arch='t',
        attn='elfatt',
        # 14x14 windows in stages 1-3: the block sizes that reproduce the
        # attention FLOPs of Tables 2-3 (docs/design.md, "ELFATT")
        block_sizes=(196, 196, 196, 49),
        out_indices=(0, 1, 2, 3),
        with_cp=False))
