"""The linearization cost tools: the measured training steps (``run.py --suite
linearize``) on a tiny CPU case, and the estimate (tools/analysis/linearize_cost.py)."""
import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_linearize_suite_times_both_stages(tmp_path):
    """The real Stage I and II distillers take training steps at 64^2: a row each,
    Stage I training fewer parameters than Stage II (only the replaced parts)."""
    out = subprocess.run(
        [sys.executable, str(ROOT / 'tools' / 'benchmarks' / 'run.py'), '--suite',
         'linearize', '--device', 'cpu', '--cases', 'stage1', 'stage2', '--size', '64',
         '--batch', '1', '--repeat', '1', '--out', str(tmp_path)],
        capture_output=True, text=True, timeout=600,
        env=dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS='1'))
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {r['case']: r for r in csv.DictReader(open(tmp_path / 'linearize_cpu.csv'))}
    assert set(rows) == {'stage1', 'stage2'}
    assert all(r['status'] == 'ok' and float(r['img_per_s']) > 0 for r in rows.values())
    assert 0 < float(rows['stage1']['trained_m']) < float(rows['stage2']['trained_m'])


@pytest.mark.slow
def test_linearize_cost_estimate(capsys):
    """Counted MACs add up by pass (Stage I: teacher + student layers forward, the
    trained parts' backward 2x; pretraining: backward 2x the student's forward), and
    both stages' MACs come to under 3% of a 300-epoch pretraining."""
    pytest.importorskip('triton')  # the WKV times come from compiled kernels
    from tools.analysis import linearize_cost
    costs, parts = linearize_cost.stage_costs(224, 128)
    (_, fwd1, bwd1, _), (_, fwd2, bwd2, wkv2), (_, fwd3, bwd3, wkv3) = costs
    assert parts['teacher'] < fwd1 < parts['teacher'] + parts['backbone']
    assert fwd2 == pytest.approx(parts['teacher'] + 2 * parts['head'] + parts['backbone'])
    assert bwd3 == bwd2 == 2 * fwd3 and bwd1 <= 2 * (fwd1 - parts['teacher'])
    assert wkv2 == wkv3 and all(t > 0 for t in wkv2.values())
    n1, n2, n3 = linearize_cost.images_per_stage()[0]
    assert (fwd1 + bwd1) * n1 + (fwd2 + bwd2) * n2 < 0.03 * (fwd3 + bwd3) * n3
    linearize_cost.main(['--size', '224'])
    out = capsys.readouterr().out
    assert out.startswith('ESTIMATED') and out.count('| Stage I (layer-wise)') == 1
