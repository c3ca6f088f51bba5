"""High-resolution inference of Linear InfViT-4L within the issue's memory bounds.

Benchmark-marked (not in the default run): ``pytest -m benchmark
tests/models/test_infvit_highres.py``. Each case runs the benchmark runner's infvit suite
(tools/benchmarks/run.py) in a fresh
process and reads its peak memory (process RSS on CPU, max allocated on GPU).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / 'tools' / 'benchmarks' / 'run.py'


def peak_mb(res, device, dtype):
    out = subprocess.run(
        [sys.executable, str(TOOL), '--suite', 'infvit', '--single',
         json.dumps(dict(model='linear', res=res)), '--depth', '4', '--repeat',
         '0', '--device', device, '--dtype', dtype],
        capture_output=True, text=True, timeout=1800,
        env=dict(os.environ, PYTHONPATH=str(ROOT)))  # this checkout's mmhybrid
    assert out.returncode == 0, out.stderr[-2000:]
    row = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"linear-4l {res}^2 on {device}: {row['peak_mb']:.0f} MB peak, "
          f"{row['latency_ms']:.0f} ms")
    return row['peak_mb']


@pytest.mark.benchmark
def test_linear_4l_2048_on_cpu_within_8gb():
    assert peak_mb(2048, 'cpu', 'float32') < 8 * 1024


@pytest.mark.benchmark
@pytest.mark.cuda
def test_linear_4l_9216_on_gpu_within_40gb():
    assert peak_mb(9216, 'cuda', 'float16') < 40 * 1024
