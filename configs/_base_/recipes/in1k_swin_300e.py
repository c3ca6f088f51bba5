# ImageNet-1K classification with the Swin recipe (SoLA-Vision Sec. 5.1):
# AdamW lr 1e-3 for 1024 images per iteration (8 GPUs x 128), wd 0.05,
# 20 warm-up epochs, cosine to 1e-5 over 300 epochs, RandAugment, Mixup/CutMix,
# label smoothing, random erasing. Backbone-agnostic: a family config replaces
# model.backbone and the head in_channels.
_base_ = [
    'mmpretrain::_base_/models/swin_transformer/tiny_224.py',
    'mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py',
    'mmpretrain::_base_/schedules/imagenet_bs1024_adamw_swin.py',
    'mmpretrain::_base_/default_runtime.py',
]
custom_imports = dict(imports=['mmhybrid'], allow_failed_imports=False)
# checkpoints written atomically and loadable weights-only (init_model, --resume)
default_hooks = dict(checkpoint=dict(type='mmhybrid.AtomicCheckpointHook'))

data_root = 'data/imagenet'
train_dataloader = dict(batch_size=128, dataset=dict(data_root=data_root))
val_dataloader = dict(batch_size=128, dataset=dict(data_root=data_root))
test_dataloader = val_dataloader

optim_wrapper = dict(
    clip_grad=dict(max_norm=5.0),
    # plain-dict param groups: compile=... works; no weight decay where a module
    # lists it in no_weight_decay (mmhybrid/engine)
    constructor='mmhybrid.PlainGroupsOptimWrapperConstructor')
auto_scale_lr = dict(base_batch_size=1024)
