"""Config loading shared by tools/train.py, tools/test.py and tools/demo.py.

OpenMMLab configs copy ``data_root`` into each dataloader (and mmdet's
``CocoMetric.ann_file = data_root + '...'``) when the base file is parsed, so
``--cfg-options data_root=X`` alone would change nothing: :func:`set_data_root`
rewrites every string that is, or starts with, the old root.
"""
import os.path as osp

from mmengine.config import Config
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

from .default_scope import setup_config_scope
from .distributed import setup_cpu_distributed

DATA_KEYS = ('train_dataloader', 'val_dataloader', 'test_dataloader',
             'val_evaluator', 'test_evaluator')


def _replace(value, old, new):
    if isinstance(value, str):
        if value == old or value.startswith(old + '/'):
            return new + value[len(old):]
        return value
    if isinstance(value, dict):
        return type(value)({k: _replace(v, old, new) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return type(value)(_replace(v, old, new) for v in value)
    return value


def set_data_root(cfg, root, old_root=None):
    """Replace ``old_root`` (default ``cfg.data_root``) by ``root``, in place."""
    old = old_root if old_root is not None else cfg.get('data_root')
    if old is None:
        raise KeyError('the config has no top-level data_root to replace')
    old, new = osp.normpath(old), osp.normpath(root)
    for key in DATA_KEYS:
        if cfg.get(key) is not None:
            cfg[key] = _replace(cfg[key], old, new)
    cfg.data_root = root
    return cfg


def merge_cfg_options(cfg, options):
    """``cfg.merge_from_dict(options)``; a ``data_root`` option moves all data."""
    if not options:
        return cfg
    old = cfg.get('data_root')
    cfg.merge_from_dict(options)
    if 'data_root' in options and old is not None:
        set_data_root(cfg, options['data_root'], old_root=old)
    return cfg


def load_config(path, options=None, work_dir=None, launcher='none'):
    """Read ``path``, apply ``--cfg-options`` and pick the work dir like upstream.

    The work dir is ``work_dir``, else the config's, else
    ``work_dirs/<config name>``. The modules of the config's default scope
    (mmseg, mmdet or mmpretrain) are registered.
    """
    cfg = Config.fromfile(path)
    cfg.launcher = launcher
    merge_cfg_options(cfg, options)
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(path))[0])
    setup_config_scope(cfg)
    return cfg


def build_runner(cfg):
    """The config's ``runner_type`` if it names one, else mmengine's Runner.

    Without CUDA, multi-process runs use gloo and CPU wrappers
    (:func:`mmhybrid.utils.distributed.setup_cpu_distributed`).
    """
    setup_cpu_distributed(cfg)
    if 'runner_type' in cfg:
        return RUNNERS.build(cfg)
    return Runner.from_cfg(cfg)
