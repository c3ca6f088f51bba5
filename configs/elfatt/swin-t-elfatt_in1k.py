_base_ = ['./_base_/elfatt_in1k.py']

model = dict(
    backbone=dict(
        type='mmhybrid.SwinELFATT', arch='t', attn='elfatt', drop_path_rate=0.2),
    head=dict(in_channels=768))

# CSWin-T's recipe: 2048 images per iteration (8 GPUs x 256), lr 2e-3, wd 0.05,
# EMA decay 0.99984
train_dataloader = dict(batch_size=256)
optim_wrapper = dict(optimizer=dict(lr=2e-3, weight_decay=0.05))
auto_scale_lr = dict(base_batch_size=2048)
custom_hooks = [dict(type='EMAHook', momentum=1.6e-4, priority='ABOVE_NORMAL')]
