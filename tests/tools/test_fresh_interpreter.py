"""Plain mmseg/mmdet use in a fresh interpreter of our venv, with no ``import
mmhybrid``: the venv holds no package that breaks another (transformers >= 5 would
break mmpretrain 1.2.0's multimodal models, which mmseg and mmdet import:
docs/stable_diffusion.md), and nothing of ours is imported at interpreter start."""
import os
import subprocess
import sys

TINY = "dict(embed_dims=(16, 16, 32, 32), schedule='L/L/LS/S', hsb_routes=())"


def run_fresh(code):
    result = subprocess.run([sys.executable, '-c', code], capture_output=True,
                            text=True, timeout=600,
                            env={**os.environ, 'OMP_NUM_THREADS': '1'})
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_register_all_modules_without_importing_mmhybrid():
    out = run_fresh(
        'import sys\n'
        'from mmseg.utils import register_all_modules\n'
        'register_all_modules()\n'
        'from mmdet.utils import register_all_modules\n'
        'register_all_modules(init_default_scope=False)\n'
        'import mmpretrain.models\n'
        "print('mmhybrid' in sys.modules)\n")
    assert out.split() == ['False']


def test_scoped_type_builds_without_import():
    out = run_fresh(
        'from mmseg.registry import MODELS\n'
        f"model = MODELS.build(dict(type='mmhybrid.SoLAVision', arch={TINY}, "
        'head_dim=16))\n'
        'print(type(model).__name__)\n')
    assert out.split() == ['SoLAVision']

