# Mask R-CNN-SoLA-T on the toy COCO of tools/make_toy_data.py (tools/demo.py):
# the real config with ~160x192 inputs, 128-channel FPN and heads, fewer
# proposals and a short schedule.
# tools/demo.py starts its backbone from the toy segmentation run, as the
# paper's detectors start from ImageNet weights.
_base_ = ['../mask-rcnn_sola-t_fpn_1x_coco.py']

data_root = 'data/toy/coco/'
channels = 128
model = dict(
    backbone=dict(drop_path_rate=0.),
    neck=dict(out_channels=channels),
    rpn_head=dict(in_channels=channels, feat_channels=channels),
    roi_head=dict(
        bbox_roi_extractor=dict(out_channels=channels),
        bbox_head=dict(in_channels=channels, fc_out_channels=256),
        mask_roi_extractor=dict(out_channels=channels),
        mask_head=dict(in_channels=channels, conv_out_channels=channels)),
    train_cfg=dict(
        rpn_proposal=dict(nms_pre=1000, max_per_img=300),
        rcnn=dict(sampler=dict(num=128))),
    test_cfg=dict(rpn=dict(nms_pre=500, max_per_img=100)))

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='Resize', scale=(256, 160), keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(256, 160), keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape',
                    'scale_factor')),
]
train_dataloader = dict(
    batch_size=4, num_workers=1,
    dataset=dict(data_root=data_root, pipeline=train_pipeline))
val_dataloader = dict(
    num_workers=1,
    dataset=dict(data_root=data_root, pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val2017.json')
test_evaluator = val_evaluator

max_epochs = 3
optim_wrapper = dict(optimizer=dict(lr=5e-4))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=20),
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True,
         milestones=[max_epochs - 1], gamma=0.1),
]
train_cfg = dict(max_epochs=max_epochs, val_interval=max_epochs)
default_hooks = dict(
    logger=dict(interval=5),
    checkpoint=dict(interval=max_epochs, max_keep_ckpts=1))

# reproducible demo figures
randomness = dict(seed=0)
