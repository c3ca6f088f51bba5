"""What tools/train.py, test.py and demo.py share: config loading, the runner, and
checks of bad input before a runner is built (each a :class:`ConfigError` naming
the fix). OpenMMLab configs copy ``data_root`` into each dataloader (and mmdet's
``CocoMetric.ann_file``) when parsed, so :func:`set_data_root` rewrites every
string that is, or starts with, the old root.
"""
import copy
import difflib
import gc
import importlib
import os
import os.path as osp

import torch.distributed as dist
from mmengine.config import Config, ConfigDict, DictAction
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

from mmhybrid.utils import check_backbone_widths, register_scope
from tools.cpu_distributed import setup_cpu_distributed

DATA_KEYS = ('train_dataloader', 'val_dataloader', 'test_dataloader',
             'val_evaluator', 'test_evaluator')


class ConfigError(ValueError):
    """A config, path or option that cannot work; the message says the fix."""


def _replace(value, old, new):
    if isinstance(value, str):
        return new + value[len(old):] if value == old or value.startswith(old + '/') else value
    if isinstance(value, dict):
        return type(value)({k: _replace(v, old, new) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return type(value)(_replace(v, old, new) for v in value)
    return value


def parse_with_launcher(parser):
    """Add ``--work-dir``, ``--cfg-options`` and mmengine's ``--launcher`` /
    ``--local-rank`` to ``parser`` and parse; ``LOCAL_RANK`` is set as the upstream
    tools set it."""
    parser.add_argument('--work-dir', help='where logs, checkpoints and metrics go')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, help='override '
                        'config entries, e.g. data_root=data/ade train_dataloader.batch_size=4')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'],
                        default='none', help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args()
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


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


def load_config(path, options=None, work_dir=None, launcher='none'):
    """Read ``path`` (or ``pkg::rel``) with ``--cfg-options``, the work dir picked
    like upstream's tools, the modules of its default scope registered."""
    path = os.fspath(path)
    if '::' in path:  # pkg::rel, a config shipped in the package's .mim/configs
        package, rel = path.split('::')
        path = osp.join(osp.dirname(importlib.import_module(package).__file__), '.mim',
                        'configs', rel)
    check_config_path(path)
    cfg = Config.fromfile(path)
    cfg.launcher = launcher
    old = cfg.get('data_root')
    cfg.merge_from_dict(options or {})
    if 'data_root' in (options or {}) and old is not None:  # moves all data
        set_data_root(cfg, options['data_root'], old_root=old)
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('./work_dirs', osp.splitext(osp.basename(path))[0])
    register_scope(cfg.get('default_scope'))
    return cfg


def build_runner(cfg):
    """The config's ``runner_type`` or mmengine's Runner (CPU processes: gloo)."""
    setup_cpu_distributed(cfg)
    return RUNNERS.build(cfg) if 'runner_type' in cfg else Runner.from_cfg(cfg)


def end_process_group():
    """Free the finished run and destroy its process group, as torch asks of every
    program that starts one. The runner is a reference cycle whose DDP/FSDP wrapper
    holds the group, so only the garbage collector frees it, and only then does gloo
    join its threads. Left to interpreter shutdown, those threads can abort a process
    whose work is done ("terminate called without an active exception", SIGABRT,
    pytorch/pytorch#190489 and #179291), and torchrun then reports the run failed.
    Call it where the runner is out of scope."""
    if dist.is_available() and dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


def check_config_path(path):
    """A missing config file, with the closest names of its directory."""
    if osp.isfile(path):
        return
    folder, name = osp.split(path)
    folder = folder or '.'
    if not osp.isdir(folder):
        raise ConfigError(f'config file {path} does not exist (nor does its '
                          f'directory {folder}; working directory {os.getcwd()})')
    close = difflib.get_close_matches(
        name, [f for f in os.listdir(folder) if f.endswith('.py')], n=3, cutoff=0.5)
    hint = ('; did you mean ' + ' or '.join(osp.join(folder, c) for c in close) + '?'
            if close else f'; {folder} holds no similar .py file')
    raise ConfigError(f'config file {path} does not exist{hint}')


def _datasets(dataset):
    """A dataset config and the datasets wrapped inside it (Concat, Repeat...)."""
    yield dataset
    for key in ('dataset', 'datasets'):
        inner = dataset.get(key)
        for d in (inner if isinstance(inner, (list, tuple)) else [inner]):
            if isinstance(d, dict):
                yield from _datasets(d)


def _missing_data(cfg, loader):
    """(what, path) of every dataset path of ``loader`` that does not exist."""
    dataset = (cfg.get(loader) or {}).get('dataset')
    missing = []
    for d in _datasets(dataset) if isinstance(dataset, dict) else []:
        if (d.get('backend_args') or {}).get('backend', 'local') != 'local':
            continue
        root = d.get('data_root') or ''
        if root and not osp.isdir(root):
            missing.append((f'{loader} data_root', root))
            continue
        prefixes = d.get('data_prefix')
        prefixes = prefixes.values() if isinstance(prefixes, dict) else [prefixes]
        for what, path, exists in [('ann_file', d.get('ann_file'), osp.isfile)] + [
                ('data_prefix', p, osp.isdir) for p in prefixes]:
            if isinstance(path, str) and path and not exists(osp.join(root, path)):
                missing.append((f'{loader} {what}', osp.join(root, path)))
    return missing


def check_data(cfg, loaders):
    """Every local data root, annotation file and image folder that the given
    dataloaders (and their evaluators) read must exist."""
    missing = []
    for loader in loaders:
        missing += _missing_data(cfg, loader)
        evaluator = loader.replace('dataloader', 'evaluator')
        metrics = cfg.get(evaluator)
        missing += [(f'{evaluator} ann_file', m['ann_file'])
                    for m in (metrics if isinstance(metrics, (list, tuple)) else [metrics])
                    if isinstance(m, dict) and isinstance(m.get('ann_file'), str)
                    and m['ann_file'] and not osp.isfile(m['ann_file'])]
    if not missing:
        return
    seen = dict.fromkeys(path for _, path in missing)
    where = {path: what for what, path in reversed(missing)}
    fix = ('pass --cfg-options data_root=PATH' if cfg.get('data_root') is not None
           else 'set the dataset paths in the config')
    raise ConfigError(
        'dataset not found: ' + ', '.join(f'{where[p]} {p}' for p in seen) +
        f' (working directory {os.getcwd()}); put the data there or {fix}')


def _checkpoint_paths(node, where):
    """(where, path) of the local checkpoints a model config names."""
    if isinstance(node, dict):
        if node.get('type') == 'Pretrained' and isinstance(node.get('checkpoint'), str):
            yield f'{where}.checkpoint', node['checkpoint']
        if isinstance(node.get('pretrained'), str):
            yield f'{where}.pretrained', node['pretrained']
        for key, value in node.items():
            yield from _checkpoint_paths(value, f'{where}.{key}')
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            yield from _checkpoint_paths(value, f'{where}[{i}]')


def check_checkpoint_paths(cfg, load_from=True):
    """Local checkpoints named by the model's ``init_cfg``/``pretrained`` (and
    ``load_from``) must exist; URLs and ``scheme://`` names are not checked."""
    found = list(_checkpoint_paths(cfg.get('model'), 'model'))
    if load_from and isinstance(cfg.get('load_from'), str):
        found.append(('load_from', cfg.load_from))
    missing = [(where, path) for where, path in found
               if '://' not in path and not osp.isfile(osp.expanduser(path))]
    if missing:
        raise ConfigError(
            'checkpoint not found: ' + ', '.join(f'{w}={p!r}' for w, p in missing) +
            f' (working directory {os.getcwd()}); fix the path, or remove the '
            'entry to start from scratch')


def check_widths(cfg):
    """The neck (or heads) of the model read the channels its backbone returns
    (:func:`mmhybrid.utils.check_backbone_widths`, one dry run of the backbone)."""
    try:
        check_backbone_widths(cfg)
    except ValueError as err:
        raise ConfigError(str(err)) from err


def check_work_dir(cfg, resume=False):
    """Refuse to start a new run in a work dir that holds another run's
    checkpoints or config dump (mmengine would overwrite them)."""
    work_dir = cfg.work_dir
    if resume or not osp.isdir(work_dir):
        return
    found = sorted(f for f in os.listdir(work_dir)
                   if f == 'last_checkpoint' or f.endswith(('.pth', '.py')))
    if found:
        shown = ', '.join(found[:3]) + (', ...' if len(found) > 3 else '')
        raise ConfigError(
            f'work dir {work_dir} already holds a run ({shown}); continue it with '
            '--resume, or give this run another --work-dir (nothing was written)')


def _default_flip_tta(cfg, pack):
    test = cfg.test_dataloader.dataset
    while 'dataset' in test:
        test = test['dataset']
    pipeline = copy.deepcopy(test.pipeline)
    pipeline[-1] = dict(type='TestTimeAug', transforms=[
        [dict(type='RandomFlip', prob=1.), dict(type='RandomFlip', prob=0.)],
        [pack]])
    return pipeline


def apply_test_options(cfg, out=None, show_dir=None, tta=False):
    """Upstream ``tools/test.py``'s ``--out``, ``--show-dir`` and ``--tta`` as the
    config's package means them. mmseg: ``out`` is a directory of label PNGs,
    ``show_dir`` gets every painted image (its hook draws every 50th), TTA needs
    the config's ``tta_pipeline``/``tta_model``. mmdet and mmpretrain: ``out`` is
    a ``.pkl`` of the predictions, TTA defaults to flip + ``DetTTAModel`` /
    ``AverageClsScoreTTA``; mmdet paints to ``<work_dir>/<timestamp>/<show_dir>``.
    """
    scope = cfg.get('default_scope', 'mmengine')
    if scope not in ('mmseg', 'mmdet', 'mmpretrain'):
        if out or show_dir or tta:
            raise ConfigError(f'--out/--show-dir/--tta know mmseg, mmdet and '
                              f'mmpretrain configs, not default_scope={scope!r}')
        return cfg
    if show_dir:
        hook = (cfg.get('default_hooks') or {}).get('visualization')
        if hook is None:
            raise ConfigError('--show-dir needs a visualization hook: add '
                              "default_hooks.visualization=dict(type='...VisualizationHook')")
        if scope == 'mmseg':
            hook.update(draw=True, interval=1)
            cfg.visualizer['save_dir'] = show_dir
        elif scope == 'mmdet':
            hook.update(draw=True, test_out_dir=show_dir)
        else:
            hook.update(enable=True, out_dir=show_dir)
    if tta:
        if scope == 'mmseg':
            if 'tta_model' not in cfg or 'tta_pipeline' not in cfg:
                raise ConfigError('--tta needs tta_model and tta_pipeline in the '
                                  'config (mmseg dataset bases define them)')
        elif scope == 'mmdet':
            cfg.setdefault('tta_model', ConfigDict(type='DetTTAModel', tta_cfg=dict(
                nms=dict(type='nms', iou_threshold=0.5), max_per_img=100)))
            if (cfg.tta_model.get('type') == 'DetTTAModel'
                    and (cfg.model.get('roi_head') or {}).get('mask_head')):
                raise ConfigError(
                    "--tta: mmdet's DetTTAModel merges boxes only and refuses masks; "
                    'test without --tta, or test boxes alone with --cfg-options '
                    'model.roi_head.mask_head=None test_evaluator.metric=bbox')
            if 'tta_pipeline' not in cfg:
                cfg.tta_pipeline = _default_flip_tta(cfg, dict(type='PackDetInputs'))
        else:
            cfg.setdefault('tta_model', ConfigDict(type='mmpretrain.AverageClsScoreTTA'))
            if 'tta_pipeline' not in cfg:
                cfg.tta_pipeline = _default_flip_tta(
                    cfg, cfg.test_dataloader.dataset.pipeline[-1])
        cfg.model = ConfigDict(**cfg.tta_model, module=cfg.model)
        cfg.test_dataloader.dataset.pipeline = cfg.tta_pipeline
    if out:
        if scope == 'mmseg':
            cfg.test_evaluator['output_dir'] = out
            cfg.test_evaluator['keep_results'] = True
        else:
            if not out.endswith(('.pkl', '.pickle')):
                raise ConfigError(f'--out {out}: predictions are dumped to a pickle '
                                  'file, give a path ending in .pkl')
            dump = dict(type='DumpDetResults' if scope == 'mmdet' else 'DumpResults',
                        out_file_path=out)
            evaluator = cfg.test_evaluator
            cfg.test_evaluator = (list(evaluator) if isinstance(evaluator, (list, tuple))
                                  else [evaluator]) + [dump]
    return cfg
