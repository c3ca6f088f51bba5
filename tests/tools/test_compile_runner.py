"""mmengine's ``compile=...`` with our models: one training iteration of a tiny
UPerNet-SoLA (WKV, softmax and Hidden State Bridge layers) through the real
``Runner``, whose ``train_step`` is then ``torch.compile``d, gives eager's loss and
gradient norm.

mmengine's default constructor gives the optimizer ``ConfigDict`` param groups when
the config has a ``paramwise_cfg`` (ours do), on which dynamo (torch 2.14) fails in
``Adam.step``; our config bases name ``PlainGroupsOptimWrapperConstructor``.
"""
import pytest
import torch.nn as nn
from mmengine.config import ConfigDict
from mmengine.hooks import Hook
from mmengine.optim import build_optim_wrapper

import mmhybrid  # noqa: F401  (registers the constructor)
from tests._tiny_toy_config import write_tiny_toy_config
from tests._toy_runner import build_toy_runner, toy_config


def test_constructor_gives_mmengines_groups_as_plain_dicts():
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
    cfg = dict(type='OptimWrapper', optimizer=dict(type='AdamW', lr=1e-3,
                                                   weight_decay=0.05),
               paramwise_cfg=dict(norm_decay_mult=0.))
    default = build_optim_wrapper(model, ConfigDict(cfg)).optimizer.param_groups
    plain = build_optim_wrapper(model, ConfigDict(
        cfg, constructor='mmhybrid.PlainGroupsOptimWrapperConstructor'))
    plain = plain.optimizer.param_groups
    assert any(isinstance(g, ConfigDict) for g in default)
    assert [type(g) for g in plain] == [dict] * len(default)
    assert plain == [dict(g) for g in default]
    assert [g['weight_decay'] for g in plain] == [0.05, 0.05, 0., 0.]


class Record(Hook):
    """The loss and gradient norm of the first iteration."""

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        self.values = dict(
            loss=outputs['loss'].item(),
            grad_norm=runner.message_hub.get_scalar('train/grad_norm').current())


def _first_iteration(toy_data, tmp_path, name, compile_cfg):
    work_dir = tmp_path / name
    cfg = toy_config(write_tiny_toy_config(tmp_path, iters=1), toy_data, work_dir,
                     validate=False)
    # a clip that never clips: the optimizer wrapper then reports the grad norm
    cfg.optim_wrapper.clip_grad = dict(max_norm=1e9)
    cfg.compile = compile_cfg
    runner = build_toy_runner(cfg)
    record = Record()
    runner.register_hook(record)
    runner.train()
    return record.values


# slow: ~2 CPU-minutes for aot_eager (dynamo traces the whole train_step)
@pytest.mark.slow
@pytest.mark.parametrize('backend', ['aot_eager', 'inductor'])
def test_runner_compile_matches_eager(toy_data, tmp_path, backend):
    import torch._dynamo
    eager = _first_iteration(toy_data, tmp_path, 'eager', None)
    torch._dynamo.reset()
    try:
        compiled = _first_iteration(toy_data, tmp_path, backend, dict(backend=backend))
    finally:
        torch._dynamo.reset()
    for key, value in eager.items():
        assert abs(compiled[key] - value) <= 1e-4 * abs(value), (key, compiled, eager)
