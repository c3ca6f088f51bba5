# Stage II of sola-s_swin-t_stage2.py at toy scale: the toy Stage I's teacher,
# student and data, now end to end (output maps + logits KL, InfiniteVL Eq. 4
# adapted), starting from the toy Stage I's last checkpoint (load_from). The
# classifier has the toy set's 4 classes: with a teacher checkpoint
# (--cfg-options model.teacher.init_cfg.type=Pretrained
#  model.teacher.init_cfg.checkpoint=PATH) its head.fc (or head) is the teacher's;
# random otherwise (the mechanics only).
_base_ = ['./sola-s_swin-t_toy_stage1.py']

load_from = 'work_dirs/sola-s_swin-t_toy_stage1/iter_100.pth'
model = dict(stage='end_to_end', head=dict(num_classes=4, in_channels=128))
optim_wrapper = dict(optimizer=dict(lr=5e-4))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-2, by_epoch=False, begin=0, end=10),
    dict(type='CosineAnnealingLR', eta_min=1e-6, by_epoch=False, begin=10,
         end={{_base_.max_iters}}),
]
