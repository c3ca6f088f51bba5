# Runtime of both linearization stages: iteration-based (an image folder has
# no natural epoch), AdamW, our atomic weights-only checkpoints, no validation.
# A stage config sets max_iters, the learning rate and its schedule.
_base_ = ['mmpretrain::_base_/default_runtime.py']
custom_imports = dict(imports=['mmhybrid'], allow_failed_imports=False)

train_cfg = dict(type='IterBasedTrainLoop', max_iters=1000)
# No weight decay: both stages are a short regression onto the teacher, and decay
# would pull what is inherited (norms, WKV rates, gates) away from it.
optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0., betas=(0.9, 0.999)),
    clip_grad=dict(max_norm=5.0))
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=50),
    checkpoint=dict(type='mmhybrid.AtomicCheckpointHook', by_epoch=False,
                    interval=500, max_keep_ckpts=2))
log_processor = dict(by_epoch=False)
# learning rates are given for 1024 images per iteration (8 GPUs x 128)
auto_scale_lr = dict(base_batch_size=1024)
