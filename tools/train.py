"""Train from any mmseg, mmdet or mmpretrain config (upstream's tools/train.py).

``--cfg-options data_root=PATH`` moves every dataloader and evaluator to PATH.
``--resume`` reads your own checkpoint trusted (it may hold Python objects, e.g.
when written by mmengine's own CheckpointHook); without a path it takes the
newest intact checkpoint of the work dir (``mmhybrid.utils.find_latest_checkpoint``).
"""
import argparse
import os

from mmengine.device import get_device

import mmhybrid  # noqa: F401  registers our models
from mmhybrid.utils import find_latest_checkpoint, trusted_path
from tools._common import (ConfigError, build_runner, check_checkpoint_paths, check_data,
                           check_widths, check_work_dir, end_process_group,
                           load_config, parse_with_launcher)


def parse_args():
    parser = argparse.ArgumentParser(description='Train a model')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--resume', nargs='?', const='auto', help='resume from this '
                        'checkpoint, or (no path) from the latest one in the work dir')
    parser.add_argument('--amp', action='store_true',
                        help='automatic mixed precision (AmpOptimWrapper, dynamic loss scale)')
    parser.add_argument('--auto-scale-lr', action='store_true',
                        help='scale the learning rate by the actual total batch size')
    return parse_with_launcher(parser)


def load_checked_config(args):
    """The config, checked before anything is logged, dumped or overwritten."""
    try:
        cfg = load_config(args.config, args.cfg_options, args.work_dir, args.launcher)
        check_data(cfg, ['train_dataloader', 'val_dataloader'])
        check_checkpoint_paths(cfg, load_from=args.resume is None)
        check_widths(cfg)
        if args.resume not in (None, 'auto') and not os.path.isfile(args.resume):
            raise ConfigError(f'--resume {args.resume}: no such checkpoint')
        check_work_dir(cfg, resume=args.resume is not None)
    except ConfigError as err:
        raise SystemExit(f'error: {err}') from None
    return cfg


def enable_amp(cfg):
    """``--amp``: AmpOptimWrapper, which asserts a GPU in mmengine 0.10.7."""
    if get_device() == 'cpu':
        raise SystemExit(
            'error: --amp uses mmengine\'s AmpOptimWrapper, which needs a GPU '
            '(CUDA, NPU, MLU or MUSA) in mmengine 0.10.7; this machine has none. '
            'Train without --amp (fp32).')
    wrapper = cfg.optim_wrapper.get('type', 'OptimWrapper')
    if wrapper not in ('OptimWrapper', 'AmpOptimWrapper'):
        raise SystemExit(f'error: --amp needs an OptimWrapper; the config uses '
                         f'{wrapper}')
    cfg.optim_wrapper.type = 'AmpOptimWrapper'
    cfg.optim_wrapper.setdefault('loss_scale', 'dynamic')


def main():
    args = parse_args()
    cfg = load_checked_config(args)
    if args.amp:
        enable_amp(cfg)
    if args.auto_scale_lr:
        if 'auto_scale_lr' not in cfg:
            raise ValueError('the config has no auto_scale_lr.base_batch_size')
        cfg.auto_scale_lr.enable = True
    resume_from = args.resume
    if resume_from == 'auto':
        try:
            resume_from = find_latest_checkpoint(cfg.work_dir)
        except RuntimeError as err:  # only damaged checkpoints in the work dir
            raise SystemExit(f'error: {err}') from None
    if resume_from is not None:
        cfg.resume, cfg.load_from = True, trusted_path(resume_from)
    elif args.resume == 'auto':
        cfg.resume, cfg.load_from = False, None
    runner = build_runner(cfg)
    if args.resume == 'auto':
        runner.logger.info(f'Auto resumed from the latest checkpoint {resume_from}.'
                           if resume_from else f'--resume: no checkpoint in '
                           f'{cfg.work_dir}, training from scratch')
    runner.train()
    del runner  # end_process_group frees it
    end_process_group()


if __name__ == '__main__':
    main()
