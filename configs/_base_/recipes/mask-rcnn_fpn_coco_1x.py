# Mask R-CNN + FPN on COCO 2017, 1x schedule (12 epochs), AdamW lr 1e-4,
# wd 0.05, 16 images per iteration (8 GPUs x 2), as in SoLA-Vision Sec. 5.2.
# Backbone-agnostic: a family config replaces model.backbone and the neck
# in_channels. Point it at your data with --cfg-options data_root=...
_base_ = [
    'mmdet::_base_/models/mask-rcnn_r50_fpn.py',
    'mmdet::_base_/datasets/coco_instance.py',
    'mmdet::_base_/schedules/schedule_1x.py',
    'mmdet::_base_/default_runtime.py',
]
custom_imports = dict(imports=['mmhybrid'], allow_failed_imports=False)
# checkpoints written atomically and loadable weights-only (init_model, --resume)
default_hooks = dict(checkpoint=dict(type='mmhybrid.AtomicCheckpointHook'))

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    # plain-dict param groups: compile=... works; no weight decay where a module
    # lists it in no_weight_decay (mmhybrid/engine)
    constructor='mmhybrid.PlainGroupsOptimWrapperConstructor',
    optimizer=dict(
        type='AdamW', lr=1e-4, betas=(0.9, 0.999), weight_decay=0.05),
    paramwise_cfg=dict(norm_decay_mult=0.))
max_epochs = 12
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0,
         end=1000),
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True,
         milestones=[8, 11], gamma=0.1),
]

train_dataloader = dict(batch_size=2)
auto_scale_lr = dict(enable=False, base_batch_size=16)
