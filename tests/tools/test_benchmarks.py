"""The benchmark tools end to end on small cases: the runner (tools/benchmarks),
its backbone profile, and the deploy suite's whole-image cases."""
import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_help_lists_every_suite_and_its_options():
    """``run.py --help`` without ``--suite`` shows each suite's own options."""
    out = subprocess.run(
        [sys.executable, str(ROOT / 'tools' / 'benchmarks' / 'run.py'), '--help'],
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS='1'))
    assert out.returncode == 0, out.stderr[-2000:]
    from tools.benchmarks.run import SUITES
    for suite, option in zip(SUITES, ('--models', '--ops', '--block-size',
                                      '--resolutions', '--unet-latents', '--model')):
        section = out.stdout.split(f'suite {suite}:')[1].split('suite ')[0]
        assert option in section, (suite, option)


def test_ops_suite_writes_its_table(tmp_path):
    """One op at one small stage: CSV and PNG written, the op and its linear
    yardstick in it, times and ratios positive and consistent."""
    out = subprocess.run(
        [sys.executable, str(ROOT / 'tools' / 'benchmarks' / 'run.py'), '--suite',
         'ops', '--ops', 'swa', '--size', '64', '--stages', '4', '--repeat', '1',
         '--device', 'cpu', '--out', str(tmp_path)],
        capture_output=True, text=True, timeout=600,
        env=dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS='1'))
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / 'ops_cpu.png').stat().st_size > 0
    rows = {r['op']: r for r in csv.DictReader(open(tmp_path / 'ops_cpu.csv'))}
    assert set(rows) == {'swa', 'linear'}
    op, linear = rows['swa'], rows['linear']
    assert op['tokens'] == linear['tokens'] == '4' and op['channels'] == '256'
    for key in ('fwd_ms', 'fwd_bwd_ms', 'gmacs', 'fwd_gmac_s'):
        assert float(op[key]) > 0, key
    ratio = float(op['fwd_ms']) / float(linear['fwd_ms'])
    assert abs(float(op['fwd_x_linear_time']) / ratio - 1) < 1e-6


def test_case_over_its_time_cap_is_a_row(tmp_path):
    """Backbone cases run in child processes: one past ``--time-cap`` is a status
    row in the table and the CSV, not a crash."""
    out = subprocess.run(
        [sys.executable, str(ROOT / 'tools' / 'benchmarks' / 'run.py'), '--suite',
         'backbones', '--device', 'cpu', '--models', 'mmseg-swin-t', '--sizes', '64',
         '--train-size', '0', '--time-cap', '0.01', '--out', str(tmp_path)],
        capture_output=True, text=True, timeout=600,
        env=dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS='1'))
    assert out.returncode == 0, out.stderr[-2000:]
    [row] = csv.DictReader(open(tmp_path / 'backbones_cpu.csv'))
    assert row['status'] == 'too slow (>0.01 s)' and row['model'] == 'mmseg-swin-t'
    assert not row.get('time_ms') and (tmp_path / 'backbones_cpu.png').stat().st_size > 0


def _whole_image(*argv):
    return subprocess.run(
        [sys.executable, str(ROOT / 'tools' / 'benchmarks' / 'run.py'), '--suite', 'deploy',
         '--device', 'cpu', '--whole-image', *argv], capture_output=True, text=True,
        timeout=600, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS='1'))


def test_whole_image_backbones_append_and_stop_at_the_cap(tmp_path):
    """The deploy suite's whole-image backbone mode: one row per size, --append keeps
    the earlier rows, and a model over the time cap is a row with the peak memory it
    had reached and is not run at larger sizes."""
    config = 'configs/infinitevl/upernet_infinitevl-t_ade20k.py'
    out, csv_path = ('--out', str(tmp_path)), tmp_path / 'whole_image_cpu.csv'
    run = _whole_image('64', '--backbone-models', config, *out)
    assert run.returncode == 0, run.stderr[-2000:]
    run = _whole_image('80', '--backbone-models', config, *out, '--append')
    assert run.returncode == 0, run.stderr[-2000:]
    rows = list(csv.DictReader(open(csv_path)))
    assert [(r['mode'], r['size'], r['status']) for r in rows] == [
        ('backbone', '64', 'ok'), ('backbone', '80', 'ok')]
    assert all(float(r['time_s']) > 0 and float(r['peak_mib']) > 0 for r in rows)
    assert (tmp_path / 'whole_image_cpu.png').stat().st_size > 0
    run = _whole_image('64', '96', '--backbone-models', config, *out, '--time-cap', '0.5')
    [row] = csv.DictReader(open(csv_path))
    assert row['size'] == '64' and row['status'] == 'too slow (>0.5 s)'
    assert not row.get('time_s') and float(row['peak_mib']) > 0


def test_deploy_runtimes_table(tmp_path):
    """The deploy suite's runtimes on a tiny SoLA: eager and onnxruntime rows with
    times, the ratio to eager, and the onnxruntime output checked against eager."""
    run = subprocess.run(
        [sys.executable, str(ROOT / 'tools' / 'benchmarks' / 'run.py'), '--suite', 'deploy',
         '--device', 'cpu', '--model', 'sola-min', '--shape', '64', '96', '--repeat', '1',
         '--runtimes', 'eager', 'onnxruntime', '--out', str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS='1'))
    assert run.returncode == 0, run.stderr[-2000:]
    eager, ort = csv.DictReader(open(tmp_path / 'deploy_cpu.csv'))
    assert (eager['runtime'], ort['runtime']) == ('eager', 'onnxruntime')
    assert eager['status'] == ort['status'] == 'ok'
    assert float(eager['rel_err']) == 0 and float(ort['rel_err']) < 1e-4
    ratio = float(eager['time_s']) / float(ort['time_s'])
    assert float(ort['vs_eager']) == pytest.approx(ratio) and float(eager['vs_eager']) == 1


def test_gemm_profile_counts_the_matmuls_it_executes():
    """The backbones suite's profile: dense GEMMs (linear, full conv), batched ones
    (bmm, SDPA) with their multiply-adds, a depth-wise conv in neither."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from tools.benchmarks.backbones import gemm_profile

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
            self.fc = nn.Linear(8, 12)

        def forward(self, x):  # (1, 3, 5, 7) -> 35 tokens
            t = self.fc(self.dw(self.conv(x)).flatten(2).transpose(1, 2))  # (1, 35, 12)
            q = t.view(1, 35, 3, 4).transpose(1, 2)  # (1, 3, 35, 4)
            return F.scaled_dot_product_attention(q, q, q) + torch.bmm(t, t.mT)[:, :1, :1]

    row = gemm_profile(Net(), torch.randn(1, 3, 5, 7))
    assert row['dense_gmacs'] * 1e9 == 35 * 8 * 3 * 9 + 35 * 8 * 12
    assert row['batched_gmacs'] * 1e9 == 3 * 35 * 35 * (4 + 4) + 35 * 35 * 12
    assert 0 < row['gemm_share'] < 1
    assert row['dense_share'] + row['batched_share'] == pytest.approx(row['gemm_share'])
