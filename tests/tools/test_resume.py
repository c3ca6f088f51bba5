"""Resuming an interrupted run with the real Runner (torch >= 2.6 weights_only).

mmengine 0.10 checkpoints hold more than tensors, so torch's weights_only
default refuses them. ``mmhybrid.AtomicCheckpointHook`` (our config bases) writes
them in a weights-only form and rebuilds the objects on load, so mmengine's own
``resume=True`` works unchanged; a checkpoint of mmengine's own CheckpointHook
(a full pickle) resumes only as the user's trusted file (``trusted_path``, what
``tools/train.py --resume`` passes) and is refused by ``init_cfg`` Pretrained.
"""
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from mmengine.hooks import Hook

from tests._toy_runner import build_toy_runner, toy_config
from mmhybrid.models.backbones.sola_vision import SoLAVision
from mmhybrid.models.utils import load_pretrained
from mmhybrid.utils import CheckpointError, trusted_path

CONFIG = (Path(__file__).resolve().parents[2] /
          'configs/sola/demo/upernet_sola-t_toy-ade.py')


class Interrupt(Exception):
    pass


class InterruptAfter(Hook):
    """Stop training after iteration ``n`` (its checkpoint already saved)."""
    priority = 'LOWEST'

    def __init__(self, n):
        self.n = n

    def after_train_iter(self, runner, batch_idx, data_batch=None,
                         outputs=None):
        if runner.iter + 1 == self.n:
            raise Interrupt


class RecordStart(Hook):

    def __init__(self):
        self.first_iter = None

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        if self.first_iter is None:
            self.first_iter = runner.iter


def _cfg(toy_data, work_dir, hook='mmhybrid.AtomicCheckpointHook'):
    cfg = toy_config(CONFIG, toy_data, work_dir, iters=4, validate=False)
    cfg.default_hooks.checkpoint = dict(type=hook, by_epoch=False, interval=2)
    return cfg


def _interrupt(cfg):
    runner = build_toy_runner(cfg, iters=4)
    runner.register_hook(InterruptAfter(2))
    with pytest.raises(Interrupt):
        runner.train()
    work_dir = Path(cfg.work_dir)
    assert (work_dir / 'iter_2.pth').is_file()
    return runner.model.state_dict()


def _resume(cfg, load_from=None):
    """Train ``cfg`` to iteration 4, resuming (from the latest checkpoint of its
    work dir unless ``load_from``); the first iteration it trains."""
    cfg.resume, cfg.load_from = True, load_from
    runner = build_toy_runner(cfg, iters=4)
    start = RecordStart()
    runner.register_hook(start)
    runner.train()
    assert runner.iter == 4
    return start.first_iter


@pytest.fixture(scope='module')
def interrupted(toy_data, tmp_path_factory):
    """Work dir of a 4-iteration run interrupted after iteration 2 (our hook)."""
    work_dir = tmp_path_factory.mktemp('interrupted')
    return work_dir, _interrupt(_cfg(toy_data, work_dir))


def test_mmengine_resume_continues_from_our_checkpoint(toy_data, interrupted):
    work_dir, state_at_2 = interrupted
    # written weights-only: torch's default mode reads it, no trust needed
    raw = torch.load(work_dir / 'iter_2.pth', weights_only=True)
    assert {'message_hub', 'optimizer', 'param_schedulers'} <= set(raw)
    assert _resume(_cfg(toy_data, work_dir)) == 2  # mmengine's own auto-resume
    assert (work_dir / 'iter_4.pth').is_file()
    # training went on from the interrupted weights
    resumed = torch.load(work_dir / 'iter_4.pth', map_location='cpu',
                         weights_only=True)['state_dict']
    key = 'decode_head.conv_seg.weight'
    assert not torch.equal(resumed[key], state_at_2[key])


def test_full_pickle_resumes_only_trusted(toy_data, tmp_path):
    work_dir = tmp_path / 'upstream_hook'
    _interrupt(_cfg(toy_data, work_dir, hook='CheckpointHook'))
    full = work_dir / 'iter_2.pth'  # what mmengine alone writes: a full pickle
    assert torch.serialization.get_unsafe_globals_in_checkpoint(str(full))
    with pytest.raises(pickle.UnpicklingError, match='Weights only load failed'):
        _resume(_cfg(toy_data, work_dir, hook='CheckpointHook'), str(full))
    assert _resume(_cfg(toy_data, work_dir, hook='CheckpointHook'),
                   trusted_path(str(full))) == 2


def test_pretrained_reads_our_checkpoint_and_refuses_a_full_pickle(
        interrupted, tmp_path):
    work_dir, _ = interrupted
    ours = str(work_dir / 'iter_2.pth')
    backbone = SoLAVision('t')
    load_pretrained(backbone, ours)
    state = torch.load(ours, map_location='cpu', weights_only=True)['state_dict']
    torch.testing.assert_close(backbone.pos_embed, state['backbone.pos_embed'])
    full = tmp_path / 'full_pickle.pth'
    torch.save({'state_dict': state, 'meta': {'seed': np.int64(0)}},
               full)
    with pytest.raises(CheckpointError, match='not unpickled'):
        load_pretrained(backbone, str(full))
