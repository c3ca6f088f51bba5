# Mask R-CNN + FPN on COCO 2017, 3x multi-scale (ELFATT Table 3 "3xMS"):
# 36 epochs, lr steps at 27 and 33, the shorter side drawn from 480..800
# (step 32, longer side <= 1333) as in Swin's 3x recipe. Swin's recipe also
# has a second, crop-then-resize branch; it is left out here (see
# docs/design.md, ELFATT section).
_base_ = ['./mask-rcnn_elfatt_fpn_1x_coco.py']

train_pipeline = [
    dict(type='LoadImageFromFile', backend_args=None),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='RandomChoiceResize',
         scales=[(1333, s) for s in range(480, 801, 32)],
         keep_ratio=True),
    dict(type='PackDetInputs'),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))

max_epochs = 36
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0,
         end=1000),
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True,
         milestones=[27, 33], gamma=0.1),
]
