"""Evaluate a checkpoint with any mmseg, mmdet or mmpretrain config.

``--out``, ``--show-dir`` and ``--tta`` mean what they mean in the config's own
package (:func:`tools._common.apply_test_options`). CHECKPOINT is your own file, read
trusted (``mmhybrid.utils.trusted_path``: Python objects in it are unpickled).
"""
import argparse

import mmhybrid  # noqa: F401  registers our models
from mmhybrid.utils import trusted_path
from tools._common import (ConfigError, apply_test_options, build_runner,
                           check_checkpoint_paths, check_data, check_widths,
                           end_process_group, load_config, parse_with_launcher)


def parse_args():
    parser = argparse.ArgumentParser(description='Test (and eval) a model')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file (trusted)')
    parser.add_argument('--out', help='mmseg: directory for predicted label PNGs; '
                        'mmdet / mmpretrain: .pkl file for the predictions')
    parser.add_argument('--show-dir', help='save images painted with the predictions '
                        'here (mmdet: under work_dir/timestamp/)')
    parser.add_argument('--tta', action='store_true', help="test-time augmentation (the "
                        "config's tta_pipeline/tta_model, or flip TTA for mmdet/mmpretrain)")
    parser.add_argument('--amp', action='store_true', help='test with fp16/bf16 autocast')
    return parse_with_launcher(parser)


def main():
    args = parse_args()
    try:
        cfg = load_config(args.config, args.cfg_options, args.work_dir, args.launcher)
        cfg.load_from = args.checkpoint
        cfg.resume = False
        check_data(cfg, ['test_dataloader'])
        check_checkpoint_paths(cfg)
        check_widths(cfg)
        apply_test_options(cfg, args.out, args.show_dir, args.tta)
    except ConfigError as err:
        raise SystemExit(f'error: {err}') from None
    cfg.load_from = trusted_path(args.checkpoint)
    if args.amp:
        cfg.test_cfg.fp16 = True
    metrics = build_runner(cfg).test()
    end_process_group()
    return metrics


if __name__ == '__main__':
    main()
