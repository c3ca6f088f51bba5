# Images for linearization (InfiniteVL Sec. 3.3): the distillation losses need
# only the teacher's inputs, so any folder of images serves, labels unused.
# mmpretrain's CustomDataset(with_label=False) reads every image below
# data_root, sub-folders included: ImageNet's train/, ADE20K's images/training,
# COCO's train2017, your own. Standard augmentation: random resized crop, flip.
data_root = 'data/imagenet/train'
img_size = 224

model = dict(
    data_preprocessor=dict(
        type='mmpretrain.ClsDataPreprocessor',
        mean=[123.675, 116.28, 103.53],
        std=[58.395, 57.12, 57.375],
        to_rgb=True))

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomResizedCrop', scale=img_size, backend='pillow',
         interpolation='bicubic'),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]
train_dataloader = dict(
    batch_size=128,
    num_workers=8,
    persistent_workers=True,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(type='CustomDataset', data_root=data_root, with_label=False,
                 pipeline=train_pipeline))
# distillation has no metric of its own: evaluate by fine-tuning (README.md)
val_dataloader = val_cfg = val_evaluator = None
test_dataloader = test_cfg = test_evaluator = None
