"""Checkpoints written by a real (toy) training with our config bases'
``mmhybrid.AtomicCheckpointHook`` load with the standard inference APIs
(``mmseg.apis.init_model``, ``mmdet.apis.init_detector``) under torch's
weights-only default, nothing edited or trusted; tools/test.py's upstream
``--out``, ``--show-dir`` and ``--tta`` on the same checkpoints."""
import sys
from pathlib import Path

import cv2
import mmengine
import pytest
import torch

from tests._toy_runner import build_toy_runner, toy_config
from tools import test as test_tool
from tools._common import ConfigError, apply_test_options, load_config

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = {'seg': ROOT / 'configs/sola/demo/upernet_sola-t_toy-ade.py',
           'det': ROOT / 'configs/sola/demo/mask-rcnn_sola-t_fpn_toy-coco.py'}
TOY = {'seg': 'ade', 'det': 'coco'}


@pytest.fixture(scope='module')
def trained(toy_data, tmp_path_factory):
    """{task: checkpoint} of one training iteration with the real Runner."""
    checkpoints = {}
    for task, config in CONFIGS.items():
        work_dir = tmp_path_factory.mktemp(task)
        cfg = toy_config(config, toy_data, work_dir, iters=1, validate=False)
        by_epoch = cfg.train_cfg.get('type') == 'EpochBasedTrainLoop'
        cfg.default_hooks.checkpoint = dict(
            type='mmhybrid.AtomicCheckpointHook', interval=1, by_epoch=by_epoch)
        build_toy_runner(cfg, iters=1).train()
        checkpoints[task], = work_dir.glob('*_1.pth')
    return checkpoints


def _image(toy_data, task):
    return str(next(p for p in Path(toy_data[TOY[task]]).rglob('*.jpg')
                    if 'val' in p.parent.name))


def test_training_checkpoints_are_weights_only(trained):
    for checkpoint in trained.values():
        assert torch.serialization.get_unsafe_globals_in_checkpoint(str(checkpoint)) == []
        raw = torch.load(checkpoint, weights_only=True)  # torch alone, default mode
        assert {'meta', 'state_dict', 'message_hub', 'optimizer'} <= set(raw)


def _same_weights(model, checkpoint):
    saved = torch.load(checkpoint, weights_only=True)['state_dict']
    own = model.state_dict()
    assert set(saved) == set(own)
    for key, value in saved.items():
        assert torch.equal(own[key].cpu(), value), key


def test_mmseg_init_model(trained, toy_data):
    from mmseg.apis import inference_model, init_model
    model = init_model(str(CONFIGS['seg']), str(trained['seg']), device='cpu')
    _same_weights(model, trained['seg'])
    assert 'wall' in model.dataset_meta['classes']
    image = _image(toy_data, 'seg')
    result = inference_model(model, image)
    assert result.pred_sem_seg.data.shape[-2:] == cv2.imread(image).shape[:2]


def test_mmdet_init_detector(trained, toy_data):
    from mmdet.apis import inference_detector, init_detector
    model = init_detector(str(CONFIGS['det']), str(trained['det']), device='cpu')
    _same_weights(model, trained['det'])
    assert 'sports ball' in model.dataset_meta['classes']
    result = inference_detector(model, _image(toy_data, 'det'))
    assert result.pred_instances.bboxes.shape[-1] == 4


def test_seg_out_show_dir_tta(trained, toy_data, tmp_path, monkeypatch):
    config = tmp_path / 'tta.py'  # a user's small TTA (the ADE20K base one is 12 passes)
    config.write_text(f"""_base_ = [{str(CONFIGS['seg'])!r}]
tta_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='TestTimeAug', transforms=[
        [dict(type='Resize', scale_factor=r, keep_ratio=True) for r in (0.75, 1.0)],
        [dict(type='RandomFlip', prob=0., direction='horizontal'),
         dict(type='RandomFlip', prob=1., direction='horizontal')],
        [dict(type='LoadAnnotations')], [dict(type='PackSegInputs')]])]
# mmengine keeps visualizers by name per process: not the one an mmdet test made
visualizer = dict(name='visualizer_seg_tta')
""")
    out, show = tmp_path / 'labels', tmp_path / 'painted'
    monkeypatch.setattr(sys, 'argv', [
        'test.py', str(config), str(trained['seg']), '--work-dir', str(tmp_path / 'w'),
        '--out', str(out), '--show-dir', str(show), '--tta', '--cfg-options',
        f'data_root={toy_data["ade"]}', 'test_dataloader.num_workers=0',
        'test_dataloader.persistent_workers=False'])
    metrics = test_tool.main()
    assert 0 <= metrics['mIoU'] <= 100
    images = sorted(Path(toy_data['ade'], 'images/validation').glob('*.jpg'))
    labels = sorted(out.glob('*.png'))
    assert [p.stem for p in labels] == [p.stem for p in images]
    for label, image in zip(labels, images):
        assert cv2.imread(str(label)).shape[:2] == cv2.imread(str(image)).shape[:2]
    painted = list(show.rglob('*.png'))
    assert len(painted) == len(images) and all(cv2.imread(str(p)) is not None
                                               for p in painted)


def test_det_out_show_dir_tta(trained, toy_data, tmp_path, monkeypatch):
    work_dir = tmp_path / 'w'
    out = tmp_path / 'preds.pkl'
    monkeypatch.setattr(sys, 'argv', [
        'test.py', str(CONFIGS['det']), str(trained['det']), '--work-dir', str(work_dir),
        '--out', str(out), '--show-dir', 'painted', '--tta', '--cfg-options',
        f'data_root={toy_data["coco"]}', 'model.roi_head.mask_head=None',
        'test_evaluator.metric=bbox', 'test_dataloader.num_workers=0',
        'test_dataloader.persistent_workers=False',
        # mmengine keeps visualizers by name per process: not a seg test's one
        'visualizer.name=visualizer_det_tta'])
    test_tool.main()  # metrics: {} (one training iteration predicts no box)
    images = list(Path(toy_data['coco'], 'val2017').glob('*.jpg'))
    predictions = mmengine.load(out)
    assert len(predictions) == len(images)
    assert all(p['pred_instances']['bboxes'].shape[-1] == 4 for p in predictions)
    painted = list(work_dir.glob('*/painted/*.jpg'))  # upstream: work_dir/timestamp/
    assert sorted(p.name for p in painted) == sorted(p.name for p in images)


def test_tta_wraps_the_model_as_upstream_does():
    cfg = load_config(str(CONFIGS['det']))
    cfg.model.roi_head.mask_head = None
    apply_test_options(cfg, tta=True)
    assert cfg.model.type == 'DetTTAModel' and cfg.model.module.type == 'MaskRCNN'
    flips = cfg.test_dataloader.dataset.pipeline[-1]
    assert flips.type == 'TestTimeAug' and len(flips.transforms[0]) == 2
    with pytest.raises(ConfigError, match='merges boxes only'):
        apply_test_options(load_config(str(CONFIGS['det'])), tta=True)
