"""Test Triton kernels without a GPU: in Triton's interpreter, in a subprocess.

Triton (checked on 3.8) reads ``TRITON_INTERPRET`` when ``triton`` is imported
(its own ``@jit`` helpers such as ``tl.sum`` and ``tl.zeros`` are decorated then)
and when each kernel is decorated, never at launch. Setting the variable inside a
pytest process is too late once anything has imported triton, and would switch
CUDA runs to the interpreter, so a module of kernel tests does this:

* kernel tests take ``KERNEL_DEVICE``: ``'cuda'`` when a GPU is present (native
  kernels), ``'cpu'`` inside the interpreter, else they skip;
* one driver test, :func:`run_in_interpreter`, reruns the module in a fresh
  ``python -m pytest`` with ``TRITON_INTERPRET=1`` when there is no GPU and
  fails with the child's output if any of its tests fail.
"""
import os
import re
import subprocess
import sys

import pytest
import torch

INTERPRETED = os.environ.get('TRITON_INTERPRET', '0') == '1'
KERNEL_DEVICE = 'cuda' if torch.cuda.is_available() and not INTERPRETED else (
    'cpu' if INTERPRETED else None)

needs_kernels = pytest.mark.skipif(
    KERNEL_DEVICE is None,
    reason='Triton kernels need CUDA or TRITON_INTERPRET=1 (the module\'s '
    'interpreter driver test reruns it that way)')

driver = pytest.mark.skipif(
    KERNEL_DEVICE is not None,
    reason='kernel tests already run in this process (CUDA or the interpreter)')


def run_in_interpreter(test_file, timeout=900):
    """Run ``test_file`` under ``TRITON_INTERPRET=1`` in a child pytest; returns the
    number of tests that passed there (failing with its output otherwise)."""
    pytest.importorskip('triton')
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TRITON_INTERPRET='1')
    env['PYTHONPATH'] = os.pathsep.join(p for p in (root, env.get('PYTHONPATH')) if p)
    proc = subprocess.run(
        [sys.executable, '-m', 'pytest', os.path.abspath(test_file), '-q',
         '-p', 'no:cacheprovider'],
        cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f'interpreted run failed:\n{output[-6000:]}'
    passed = re.search(r'(\d+) passed', output)
    assert passed, f'interpreted run passed no test:\n{output[-3000:]}'
    return int(passed.group(1))
