"""Resuming an interrupted run with the real Runner (torch >= 2.6 weights_only).

mmengine 0.10 checkpoints hold more than tensors, so torch's weights_only
default refuses them; ``import mmhybrid`` writes them in a weights-only form
(rebuilt on load), trusts ``Runner.resume`` for older full pickles (the user's
own files) and keeps refusing untrusted full pickles with a clear error.
"""
from pathlib import Path

import pytest
import torch
from mmengine.hooks import Hook
from mmengine.logging import HistoryBuffer

from _toy_runner import build_toy_runner, toy_config
from mmhybrid.models.backbones.sola_vision import SoLAVision
from mmhybrid.models.utils import load_pretrained
from mmhybrid.utils import trusted_checkpoints

CONFIG = (Path(__file__).resolve().parents[1] /
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


def _cfg(toy_data, work_dir):
    cfg = toy_config(CONFIG, toy_data, work_dir, iters=4, validate=False)
    cfg.default_hooks.checkpoint = dict(type='CheckpointHook', by_epoch=False,
                                        interval=2)
    return cfg


@pytest.fixture(scope='module')
def interrupted(toy_data, tmp_path_factory):
    """Work dir of a 4-iteration run interrupted after iteration 2."""
    work_dir = tmp_path_factory.mktemp('interrupted')
    runner = build_toy_runner(_cfg(toy_data, work_dir), iters=4)
    runner.register_hook(InterruptAfter(2))
    with pytest.raises(Interrupt):
        runner.train()
    assert (work_dir / 'iter_2.pth').is_file()
    return work_dir, runner.model.state_dict()


def test_resume_continues_from_checkpoint(toy_data, interrupted):
    work_dir, state_at_2 = interrupted
    cfg = _cfg(toy_data, work_dir)
    cfg.resume = True  # latest checkpoint of the work dir
    runner = build_toy_runner(cfg, iters=4)
    start = RecordStart()
    runner.register_hook(start)
    runner.train()
    assert start.first_iter == 2
    assert runner.iter == 4
    assert (work_dir / 'iter_4.pth').is_file()
    # training went on from the interrupted weights
    resumed = torch.load(work_dir / 'iter_4.pth', map_location='cpu',
                         weights_only=False)['state_dict']
    key = 'decode_head.conv_seg.weight'
    assert not torch.equal(resumed[key], state_at_2[key])


def test_training_checkpoint_loads_untrusted_full_pickle_refused(
        interrupted, tmp_path):
    work_dir, _ = interrupted
    full = str(work_dir / 'iter_2.pth')
    backbone = SoLAVision('t')
    load_pretrained(backbone, full)  # written weights-only: no trust needed
    state = torch.load(full, map_location='cpu', weights_only=True)['state_dict']
    torch.testing.assert_close(backbone.pos_embed, state['backbone.pos_embed'])
    old = tmp_path / 'full_pickle.pth'  # as mmengine alone writes it
    torch.save({'state_dict': state, 'message_hub': HistoryBuffer([1.], [1])}, old)
    with pytest.raises(RuntimeError, match='not unpickled'):
        load_pretrained(backbone, str(old))
    with trusted_checkpoints():  # the user's own full checkpoint
        load_pretrained(backbone, str(old))
