"""SIGKILL and ``--resume`` with ``tools/train.py`` in subprocesses (toy data),
checkpoints written by ``mmhybrid.AtomicCheckpointHook`` (our config bases).

* A run killed right after a checkpoint and resumed with ``--resume`` goes on
  from the saved iteration, ends at the same iteration as an uninterrupted run
  of the same seed, with the same loss and validation metrics (dropout and drop
  path off, one thread: the resumed run skips the trained batches through the
  same seeded sampler and pipeline, so the two runs agree to float rounding;
  tolerance 1e-4 relative on the loss, 0.01 on mIoU/aAcc, which are percents).
* A run killed while writing a checkpoint (fsync slowed down) leaves the
  previous checkpoint intact and ``last_checkpoint`` pointing at it, even with
  ``max_keep_ckpts=1``; no partial file carries a checkpoint name.
* A truncated or corrupted checkpoint is never taken as good by auto-resume.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from mmengine.runner.checkpoint import save_checkpoint

import mmhybrid  # noqa: F401
from mmhybrid.engine.hooks.checkpoint_hook import ATOMIC_BACKEND
from mmhybrid.utils.checkpoint import find_latest_checkpoint, is_intact

from tests._tiny_toy_config import write_tiny_toy_config
from tools._common import build_runner, load_config

ROOT = Path(__file__).resolve().parents[2]
ITERS = 6

# runs tools/train.py with fsync of the temporary file of one checkpoint
# stalled, as on a slow disk, so that the test can kill it mid-save
SLOW_SAVE = '''
import os, runpy, sys, time
stall, real_fsync = sys.argv.pop(1), os.fsync

def fsync(fd):
    if os.readlink(f'/proc/self/fd/{fd}').endswith('.part') and stall in \\
            os.readlink(f'/proc/self/fd/{fd}'):
        time.sleep(600)
    real_fsync(fd)

os.fsync = fsync
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name='__main__')
'''


@pytest.fixture(scope='module')
def config(tmp_path_factory):
    return write_tiny_toy_config(tmp_path_factory.mktemp('cfg'), ITERS,
                                 checkpoint_interval=2)


def _env():
    return dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS='1')


def _train_cmd(config, work_dir, toy_data, *extra):
    return [sys.executable, str(ROOT / 'tools/train.py'), str(config),
            '--work-dir', str(work_dir), *extra, '--cfg-options',
            f'data_root={toy_data["ade"]}']


def _run(cmd):
    result = subprocess.run(cmd, env=_env(), capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def _start_and_kill(cmd, ready, log):
    """Start ``cmd``, SIGKILL it as soon as ``ready()`` holds; its exit code."""
    with open(log, 'w') as out:
        proc = subprocess.Popen(cmd, env=_env(), stdout=out,
                                stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 600
            while not ready():
                assert proc.poll() is None, f'ended before the kill: {log}'
                assert time.monotonic() < deadline
                time.sleep(0.02)
            proc.send_signal(signal.SIGKILL)
            return proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()


def _scalars(work_dir):
    """Logged scalars of every run in ``work_dir``, in run order."""
    records = []
    for path in sorted(Path(work_dir).glob('*/vis_data/scalars.json')):
        records += [json.loads(line) for line in path.read_text().splitlines()]
    return records


def _pointer(work_dir):
    path = Path(work_dir) / 'last_checkpoint'
    return path.read_text().strip() if path.is_file() else ''


def test_sigkill_after_checkpoint_then_resume_matches_full_run(
        config, toy_data, tmp_path):
    # the uninterrupted run in this process (saves one interpreter start):
    # what tools/train.py does, with its own visualizer instance
    full = tmp_path / 'full'
    cfg = load_config(str(config), {'data_root': toy_data['ade']}, str(full))
    cfg.visualizer.name = 'uninterrupted'
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        build_runner(cfg).train()
    finally:
        torch.set_num_threads(threads)

    killed = tmp_path / 'killed'
    checkpoint = killed / 'iter_2.pth'
    code = _start_and_kill(
        _train_cmd(config, killed, toy_data),
        lambda: _pointer(killed) == str(checkpoint), tmp_path / 'killed.log')
    assert code == -signal.SIGKILL
    assert is_intact(str(checkpoint))
    assert not (killed / f'iter_{ITERS}.pth').exists()

    result = _run(_train_cmd(config, killed, toy_data, '--resume'))
    assert f'Auto resumed from the latest checkpoint {checkpoint}' in \
        result.stdout + result.stderr
    resumed = [r for r in _scalars(killed) if 'loss' in r]
    # the resumed run's first logged iteration follows the checkpoint
    resumed_steps = [r['step'] for r in resumed]
    assert resumed_steps[-(ITERS - 2):] == list(range(3, ITERS + 1))
    assert torch.load(killed / f'iter_{ITERS}.pth', map_location='cpu',
                      weights_only=False)['meta']['iter'] == ITERS

    reference = _scalars(full)
    losses = {r['step']: r['loss'] for r in reference if 'loss' in r}
    for record in resumed[-(ITERS - 2):]:
        assert record['loss'] == pytest.approx(losses[record['step']], rel=1e-4)
    metrics = [r for r in reference if 'mIoU' in r][-1]
    again = [r for r in _scalars(killed) if 'mIoU' in r][-1]
    for key in ('mIoU', 'aAcc', 'mAcc'):
        assert again[key] == pytest.approx(metrics[key], abs=0.01), key


def test_sigkill_during_checkpoint_save_keeps_previous(config, toy_data,
                                                      tmp_path):
    work_dir = tmp_path / 'work'
    script = tmp_path / 'slow_save.py'
    script.write_text(SLOW_SAVE)
    cmd = [sys.executable, str(script), 'iter_4.pth',
           *_train_cmd(config, work_dir, toy_data)[1:]]
    code = _start_and_kill(
        cmd, lambda: any(work_dir.glob('.iter_4.pth.*.part')),
        tmp_path / 'slow.log')
    assert code == -signal.SIGKILL
    # mmengine alone would have removed iter_2.pth (max_keep_ckpts=1) before
    # writing iter_4.pth in place
    assert not (work_dir / 'iter_4.pth').exists()
    assert is_intact(str(work_dir / 'iter_2.pth'))
    assert _pointer(work_dir) == str(work_dir / 'iter_2.pth')
    assert find_latest_checkpoint(str(work_dir)) == str(work_dir / 'iter_2.pth')


def _checkpoint(path, step):
    torch.save({'meta': {'iter': step}, 'state_dict': {
        'w': torch.full((256, 256), float(step))}}, path)
    return str(path)


def test_damaged_checkpoints_never_resumed(tmp_path):
    old = _checkpoint(tmp_path / 'iter_2.pth', 2)
    new = _checkpoint(tmp_path / 'iter_4.pth', 4)
    (tmp_path / 'last_checkpoint').write_text(new)
    assert find_latest_checkpoint(str(tmp_path)) == new

    data = Path(new).read_bytes()
    Path(new).write_bytes(data[:len(data) // 2])  # truncated
    assert not is_intact(new)
    assert find_latest_checkpoint(str(tmp_path)) == old

    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF  # a bit error inside a tensor
    Path(new).write_bytes(bytes(flipped))
    assert not is_intact(new)
    assert find_latest_checkpoint(str(tmp_path)) == old

    (tmp_path / 'last_checkpoint').write_text('')  # pointer cut off mid-write
    assert find_latest_checkpoint(str(tmp_path)) == old

    Path(old).write_bytes(b'')
    with pytest.raises(RuntimeError, match='no intact checkpoint'):
        find_latest_checkpoint(str(tmp_path))
    empty = tmp_path / 'fresh'
    empty.mkdir()
    assert find_latest_checkpoint(str(empty)) is None


def test_checkpoint_writes_are_atomic(tmp_path, monkeypatch):
    # mmengine's saver as the Runner calls it for AtomicCheckpointHook
    backend_args = dict(backend=ATOMIC_BACKEND)
    path = tmp_path / 'ckpt.pth'
    _checkpoint(path, 1)

    def fail(fd):
        raise OSError('disk full')

    monkeypatch.setattr(os, 'fsync', fail)
    with pytest.raises(OSError, match='disk full'):
        save_checkpoint({'meta': {'iter': 2}}, str(path), backend_args=backend_args)
    monkeypatch.undo()
    # the old file is untouched, no temporary file is left behind
    assert torch.load(path, weights_only=True)['meta']['iter'] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ['ckpt.pth']
    save_checkpoint({'meta': {'iter': 2}}, str(path), backend_args=backend_args)
    assert torch.load(path, weights_only=True)['meta']['iter'] == 2
    assert oct(path.stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask
