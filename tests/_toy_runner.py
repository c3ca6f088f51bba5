"""Configs on the toy datasets with shrunken inputs, for one-iteration tests.

The model architecture of a config is kept; only input sizes (pipelines,
``data_preprocessor.size``, sliding-window test crops), batch sizes, the
dataset length and the schedule are reduced.
"""
import os.path as osp

import pytest
from mmengine.config import Config
from mmengine.hooks import Hook

from tools._common import build_runner, load_config, set_data_root

# input short side each task is shrunk to, and the toy set it reads
TARGET_SIZE = {'mmseg': 64, 'mmdet': 96, 'mmpretrain': 64}
TOY_SET = {'mmseg': 'ade', 'mmdet': 'coco', 'mmpretrain': 'imagenet'}
SIZE_KEYS = ('scale', 'crop_size', 'scales')


def _scaled(value, factor):
    if isinstance(value, (list, tuple)):
        return type(value)(_scaled(v, factor) for v in value)
    if isinstance(value, int):
        return max(int(round(value * factor)), 1)
    return value


def _short_sides(value):
    if isinstance(value, int):
        return [value]
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(v, int) for v in value):
            return [min(value)]
        return [s for v in value for s in _short_sides(v)]
    return []


def _datasets(dataset):
    """A dataset config and the datasets wrapped inside it."""
    yield dataset
    for key in ('dataset', 'datasets'):
        inner = dataset.get(key)
        for d in (inner if isinstance(inner, list) else [inner]):
            if isinstance(d, dict):
                yield from _datasets(d)


def _transforms(pipeline):
    """The transforms of a pipeline and those nested in them (RandomChoice)."""
    for t in pipeline:
        yield t
        for branch in t.get('transforms', []):
            yield from _transforms(branch if isinstance(branch, list) else [branch])


def shrink_inputs(cfg, target):
    """Scale every input size so the train pipeline's short side is ``target``."""
    train = [t for d in _datasets(cfg.train_dataloader.dataset)
             for t in _transforms(d.get('pipeline', []))]
    ref = min(s for t in train for k in SIZE_KEYS
              for s in _short_sides(t.get(k)))
    factor = min(target / ref, 1.)
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        for d in _datasets(cfg[loader].dataset):
            for t in _transforms(d.get('pipeline', [])):
                for k in SIZE_KEYS:
                    if k in t:
                        t[k] = _scaled(t[k], factor)
    model = cfg.model
    if model.get('data_preprocessor', {}).get('size') is not None:
        model.data_preprocessor.size = _scaled(model.data_preprocessor.size,
                                               factor)
    for k in ('crop_size', 'stride'):
        if isinstance(model.get('test_cfg'), dict) and k in model.test_cfg:
            model.test_cfg[k] = _scaled(model.test_cfg[k], factor)
    return cfg


def fewer_proposals(model, num=100):
    """Cap two-stage detectors' proposals and RoI samples at ``num``."""
    train_cfg, test_cfg = model.get('train_cfg') or {}, model.get('test_cfg') or {}
    for stage in (train_cfg.get('rpn_proposal'), test_cfg.get('rpn')):
        if isinstance(stage, dict):
            stage.nms_pre = min(stage.get('nms_pre', num), 2 * num)
            stage.max_per_img = min(stage.get('max_per_img', num), num)
    rcnn = train_cfg.get('rcnn')
    if isinstance(rcnn, dict) and 'sampler' in rcnn:
        rcnn.sampler.num = min(rcnn.sampler.num, num)


class StopAfter(Hook):
    """End training after ``iters`` iterations (counted from the start)."""
    priority = 'LOWEST'

    def __init__(self, iters):
        self.iters = iters

    def after_train_iter(self, runner, batch_idx, data_batch=None,
                         outputs=None):
        if runner.iter + 1 >= self.iters:
            runner.train_loop.stop_training = True


class RecordMetrics(Hook):
    """Keeps the metrics of the last validation."""

    def __init__(self):
        self.metrics = None

    def after_val_epoch(self, runner, metrics=None):
        self.metrics = metrics


@pytest.fixture(autouse=True)
def cheap_config_text(monkeypatch):
    """Skip yapf formatting of the config the Runner logs and dumps (~0.5 s)."""
    monkeypatch.setattr(Config, 'pretty_text',
                        property(lambda self: repr(self._cfg_dict)))


def toy_config(path, toy_data, work_dir, iters=1, batch_size=2,
               validate=True):
    """``path`` on the toy data, shrunk, to train ``iters`` iterations of
    ``batch_size`` images (the same images every epoch) with
    :func:`build_toy_runner`.

    With ``validate`` the loop validates once, on one image, at the end.
    """
    cfg = load_config(str(path), work_dir=str(work_dir))
    scope = cfg.default_scope
    set_data_root(cfg, toy_data[TOY_SET[scope]])
    shrink_inputs(cfg, TARGET_SIZE[scope])
    fewer_proposals(cfg.model)
    for loader, n in (('train_dataloader', batch_size),
                      ('val_dataloader', 1), ('test_dataloader', 1)):
        cfg[loader].update(num_workers=0, persistent_workers=False,
                           batch_size=n)
        cfg[loader].dataset.indices = n
    # the real schedule (so its schedulers are built as configured), stopped
    # by build_toy_runner's StopAfter; an epoch is one iteration
    cfg.train_cfg.val_interval = iters
    if not validate:
        cfg.val_dataloader = cfg.val_cfg = cfg.val_evaluator = None
    cfg.default_hooks.checkpoint = None
    cfg.default_hooks.logger.interval = 1
    cfg.visualizer.name = f'visualizer_{osp.basename(str(work_dir))}'
    cfg.randomness = dict(seed=0)
    cfg.log_level = 'WARNING'
    return cfg


def build_toy_runner(cfg, iters=1):
    """The config's runner, stopping after ``iters`` iterations."""
    runner = build_runner(cfg)
    runner.register_hook(StopAfter(iters))
    return runner
