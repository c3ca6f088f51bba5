# UPerNet on ADE20K, 512x512 crops, 160k iterations, AdamW lr 6e-5, wd 0.01,
# 16 images per iteration (8 GPUs x 2), as in SoLA-Vision Sec. 5.2.
# Backbone-agnostic: a family config replaces model.backbone and the head
# in_channels. Point it at your data with --cfg-options data_root=...
_base_ = [
    'mmseg::_base_/models/upernet_swin.py',
    'mmseg::_base_/datasets/ade20k.py',
    'mmseg::_base_/default_runtime.py',
    'mmseg::_base_/schedules/schedule_160k.py',
]
custom_imports = dict(imports=['mmhybrid'], allow_failed_imports=False)
# checkpoints written atomically and loadable weights-only (init_model, --resume)
default_hooks = dict(checkpoint=dict(type='mmhybrid.AtomicCheckpointHook'))

crop_size = (512, 512)
data_preprocessor = dict(size=crop_size)
model = dict(
    data_preprocessor=data_preprocessor,
    decode_head=dict(num_classes=150),
    auxiliary_head=dict(num_classes=150))

# no weight decay on normalisation layers; our constructor also keeps every
# parameter a module lists in its no_weight_decay out of it (position
# embeddings, WKV and Gated DeltaNet rates, InfSA discounts, bias tables)
optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    # plain-dict param groups: compile=... works (mmhybrid/engine)
    constructor='mmhybrid.PlainGroupsOptimWrapperConstructor',
    optimizer=dict(
        type='AdamW', lr=6e-5, betas=(0.9, 0.999), weight_decay=0.01),
    paramwise_cfg=dict(
        norm_decay_mult=0.))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0,
         end=1500),
    dict(type='PolyLR', eta_min=0., power=1.0, begin=1500, end=160000,
         by_epoch=False),
]

train_dataloader = dict(batch_size=2)
val_dataloader = dict(batch_size=1)
test_dataloader = val_dataloader
