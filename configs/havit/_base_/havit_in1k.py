# HAViT ImageNet-1K classification with DeiT's recipe (mmpretrain's deit
# configs: AdamW lr 1e-3 for 1024 images per iteration, wd 0.05, cosine over 300
# epochs with 20 warm-up epochs, RandAugment, Mixup/CutMix, label smoothing 0.1,
# random erasing, clip-grad 5): the DeiT backbone replaced by HAViT (every layer
# historical attention, alpha 0.45, random H_0 -- the paper's best setting) and
# the class-token head. Stochastic depth 0.1 as in DeiT. The paper itself trains
# on CIFAR-100 / Tiny-ImageNet only (arch='paper'); see docs/design.md. Variants
# set arch and head.in_channels.
_base_ = ['mmpretrain::deit/deit-small_4xb256_in1k.py']
custom_imports = dict(imports=['mmhybrid'], allow_failed_imports=False)
# checkpoints written atomically and loadable weights-only (init_model, --resume)
default_hooks = dict(checkpoint=dict(type='mmhybrid.AtomicCheckpointHook'))

data_root = 'data/imagenet'
train_dataloader = dict(dataset=dict(data_root=data_root))
val_dataloader = dict(dataset=dict(data_root=data_root))
test_dataloader = val_dataloader

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmhybrid.HAViT',
        img_size=224,
        patch_size=16,
        history=dict(alpha=0.45, init='random'),
        out_type='cls_token',
        drop_path_rate=0.1,
        with_cp=False))
