"""Every Triton kernel compiles for A100 (sm_80) and H100 (sm_90) without a GPU, with
no register spills and shared memory within the per-block limit
(tools/analysis/compile_check.py). The default run compiles a sample that covers every
kernel once (results cached on disk by kernel source hash and configuration); the
full sweep, every dtype x head dim x target, is marked slow.
"""
import dataclasses

import pytest
import torch

pytest.importorskip('triton')

from tools.analysis import compile_check  # noqa: E402

# (op, dtype, shape, target): the largest tiles of each kernel family, spread over
# both targets; every kernel of every fused module is in it (checked below)
SAMPLE = [('effatt', torch.float32, (1, 2, 200, 64), 'A100'),
          ('effatt', torch.bfloat16, (1, 2, 200, 64), 'H100'),
          ('linear_infsa', torch.float16, (1, 2, 200, 64), 'H100'),
          ('bi_wkv', torch.bfloat16, (1, 16384, 128), 'A100')]


def assert_fits(launches, target):
    for launch in launches:
        row = compile_launch(launch, target)
        assert not compile_check.problems(row), (launch.name, target, row)


def compile_launch(launch, target):
    row = compile_check.compile_launch(launch, target)
    assert row['registers'] > 0 and row['sass'] > 0 and row['target'] == target
    return row


@pytest.mark.parametrize('op,dtype,shape,target', SAMPLE)
def test_sample_compiles_without_spills(op, dtype, shape, target):
    assert_fits(compile_check.op_launches(op, dtype, shape), target)


def test_sample_covers_every_kernel():
    """Each ``@triton.jit`` ``*_kernel`` of the fused modules is launched by the
    sample, so no kernel escapes the check."""
    from triton.runtime.jit import JITFunction

    from mmhybrid.ops.elfatt import fused as effatt
    from mmhybrid.ops.infsa import fused as infsa
    from mmhybrid.ops.wkv import fused as wkv
    defined = {(m.__name__, name) for m in (effatt, infsa, wkv)
               for name, obj in vars(m).items()
               if isinstance(obj, JITFunction) and name.endswith('_kernel')}
    launched = {(launch.kernel.fn.__module__, launch.name)
                for op, dtype, shape, _ in SAMPLE
                for launch in compile_check.op_launches(op, dtype, shape)}
    assert defined == launched


def test_check_catches_a_spilling_configuration():
    """The check can fail: EFFATT fp32 d = 64 with the tiles it had before (128 rows,
    4 warps, 3 stages) spills and overflows the A100's shared memory."""
    launch = next(launch for launch in compile_check.op_launches(
        'effatt', torch.float32, (1, 2, 200, 64)) if launch.name == '_query_grad_kernel')
    old = dataclasses.replace(launch, kwargs=dict(launch.kwargs, BLOCK_N=128,
                                                  num_warps=4, num_stages=3))
    found = ' '.join(compile_check.problems(compile_launch(old, 'A100')))
    assert 'spills' in found and 'shared memory' in found


def test_wrappers_choose_tiles_per_dtype_and_head_dim():
    launches = {dtype: compile_check.op_launches('effatt', dtype, (1, 1, 50, 64))
                for dtype in (torch.float32, torch.bfloat16)}
    fp32, bf16 = (launches[d][0].kwargs for d in (torch.float32, torch.bfloat16))
    assert fp32['BLOCK_N'] * 64 <= 1024 and fp32['num_stages'] == 1
    assert bf16['BLOCK_N'] * 64 <= 4096 and bf16['num_warps'] == 8


@pytest.mark.slow
@pytest.mark.parametrize('target', list(compile_check.TARGETS))
@pytest.mark.parametrize('op,dtype,shape', compile_check.cases(full=True))
def test_full_sweep(op, dtype, shape, target):
    assert_fits(compile_check.op_launches(op, dtype, shape), target)
