"""Two training processes on the CPU: ``tools/dist_train.sh CONFIG 2`` (torchrun,
gloo) with the Runner's DDP and with FlexibleRunner's FSDPStrategy.

The config's heads read backbone stages 2 and 3 only (``out_indices=(1, 2)``):
stage 1's norm is not built and stage 4 (with its HSB bridge) is neither run nor
trained, so DDP finds every parameter used without ``find_unused_parameters``
(with stage 4 trainable it fails at the second iteration: "Expected to have
finished reduction in the prior iteration ...").
"""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests._tiny_toy_config import write_tiny_toy_config

ROOT = Path(__file__).resolve().parents[2]
ITERS = 3


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def dist_train(config, work_dir, toy_data, nproc=2):
    env = dict(os.environ, PYTHON=sys.executable, PORT=str(_free_port()),
               OMP_NUM_THREADS='1')
    env.pop('CUDA_VISIBLE_DEVICES', None)
    result = subprocess.run(
        ['bash', str(ROOT / 'tools/dist_train.sh'), str(config), str(nproc),
         '--work-dir', str(work_dir), '--cfg-options',
         f'data_root={toy_data["ade"]}'],
        env=env, capture_output=True, text=True, timeout=900)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    return output


def _scalars(work_dir):
    (path, ) = Path(work_dir).glob('*/vis_data/scalars.json')
    return [json.loads(line) for line in path.read_text().splitlines()]


def _check_run(work_dir, output, wrapper):
    assert 'Distributed training: True' in output
    assert f"type='{wrapper}'" in output
    assert 'SyncBuffersEveryIterHook' in output
    records = _scalars(work_dir)
    assert [r['step'] for r in records if 'loss' in r] == list(
        range(1, ITERS + 1))
    (metrics, ) = [r for r in records if 'mIoU' in r]  # evaluated once
    assert 0 <= metrics['mIoU'] <= 100
    state = torch.load(Path(work_dir) / f'iter_{ITERS}.pth', map_location='cpu',
                       weights_only=False)['state_dict']
    # the full (unsharded, unwrapped) model reaches rank 0's checkpoint
    assert state['backbone.norm1.weight'].shape == (16, )
    assert 'backbone.norm0.weight' not in state
    assert state['backbone.stages.3.1.attn.qkv.weight'].shape == (96, 32)
    return state


@pytest.fixture(scope='module')
def config(tmp_path_factory):
    return write_tiny_toy_config(tmp_path_factory.mktemp('cfg'), ITERS,
                                 out_indices=(1, 2))


def test_dist_train_ddp_two_processes(config, toy_data, tmp_path):
    output = dist_train(config, tmp_path, toy_data)
    assert 'find_unused_parameters=False' in output
    _check_run(tmp_path, output, 'CPUDistributedDataParallel')


def test_dist_train_fsdp_two_processes(config, toy_data, tmp_path):
    fsdp = config.parent / 'fsdp.py'
    fsdp.write_text(f"_base_ = [{str(config)!r}]\n"
                    "runner_type = 'FlexibleRunner'\n"
                    "strategy = dict(type='FSDPStrategy', state_dict_cfg='full')\n")
    output = dist_train(fsdp, tmp_path, toy_data)
    _check_run(tmp_path, output, 'CPUFullyShardedDataParallel')


@pytest.mark.slow
def test_dist_test_reproduces_the_dist_train_metrics(config, toy_data,
                                                     tmp_path):
    """``tools/dist_test.sh CONFIG CHECKPOINT 2`` on the DDP run's checkpoint."""
    train_dir = tmp_path / 'train'
    _check_run(train_dir, dist_train(config, train_dir, toy_data),
               'CPUDistributedDataParallel')
    (trained, ) = [r for r in _scalars(train_dir) if 'mIoU' in r]
    env = dict(os.environ, PYTHON=sys.executable, PORT=str(_free_port()),
               OMP_NUM_THREADS='1')
    test_dir = tmp_path / 'test'
    result = subprocess.run(
        ['bash', str(ROOT / 'tools/dist_test.sh'), str(config),
         str(train_dir / f'iter_{ITERS}.pth'), '2', '--work-dir', str(test_dir),
         '--cfg-options', f'data_root={toy_data["ade"]}'],
        env=env, capture_output=True, text=True, timeout=900)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    for key in ('aAcc', 'mIoU', 'mAcc'):
        assert f'{key}: {trained[key]:.4f}' in output, key


ENDS_ITS_GROUP = '''
import os
import sys
import torch.distributed as dist
from tools import test, train
def gloo_threads():
    return sum('gloo' in open(f'/proc/self/task/{{task}}/comm').read()
               for task in os.listdir('/proc/self/task'))
for name, tool, argv in (('train', train, {train_argv!r}), ('test', test, {test_argv!r})):
    sys.argv = argv
    tool.main()
    print(name, 'leaves a process group:', dist.is_initialized())
    print(name, 'leaves gloo threads:', gloo_threads())
'''


def test_train_and_test_end_their_process_group(config, toy_data, tmp_path):
    """``--launcher pytorch`` runs (here one process) destroy the group they start
    and free it, joining gloo's threads (native threads, named in /proc): left to
    interpreter exit, they can abort a finished rank (SIGABRT; seen in CI on the
    FSDP run above, and on the DDP run after the group was destroyed but still held
    by the runner's wrapper)."""
    env = dict(os.environ, RANK='0', LOCAL_RANK='0', WORLD_SIZE='1',
               MASTER_ADDR='127.0.0.1', MASTER_PORT=str(_free_port()),
               OMP_NUM_THREADS='1')
    options = ['--launcher', 'pytorch', '--cfg-options', f'data_root={toy_data["ade"]}']
    script = ENDS_ITS_GROUP.format(
        train_argv=['train.py', str(config), '--work-dir', str(tmp_path / 'train'),
                    *options],
        test_argv=['test.py', str(config), str(tmp_path / f'train/iter_{ITERS}.pth'),
                   '--work-dir', str(tmp_path / 'test'), *options])
    result = subprocess.run([sys.executable, '-c', script], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    assert 'Distributed training: True' in result.stdout + result.stderr
    for tool in ('train', 'test'):
        assert f'{tool} leaves a process group: False' in result.stdout
        assert f'{tool} leaves gloo threads: 0' in result.stdout
