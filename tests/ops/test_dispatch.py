"""The backend rule every op shares (mmhybrid.ops.dispatch): ``backend=``, then
``use_backend``, then ``$MMHYBRID_BACKEND``, then the op's automatic choice."""
import subprocess
import sys

import pytest
import torch

from mmhybrid import ops
from mmhybrid.ops import dispatch
from mmhybrid.ops.dispatch import UnknownBackendError, choose_backend, use_backend

ENV = 'MMHYBRID_BACKEND'


def pick(backend=None, op='toy', names=('torch', 'fast')):
    return choose_backend(op, names, lambda: 'fast', backend)


@pytest.fixture(autouse=True)
def _no_env(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)


def test_precedence_argument_context_environment_auto(monkeypatch):
    assert pick() == 'fast'
    monkeypatch.setenv(ENV, ' Torch ')
    assert pick() == 'torch'
    with use_backend('fast'):
        assert pick() == 'fast'  # the context manager wins over the variable
        with use_backend(toy='torch'):
            assert pick() == 'torch'  # the inner block wins
        assert pick() == 'fast'
        assert pick('torch') == 'torch'  # the argument wins over everything
    assert pick() == 'torch'
    for auto in ('auto', '', None):
        assert pick(auto) == 'torch'  # defers to the variable
    monkeypatch.setenv(ENV, 'auto')
    assert pick() == 'fast'


def test_one_name_for_every_op_skips_ops_without_it(monkeypatch):
    monkeypatch.setenv(ENV, 'triton')
    assert pick() == 'fast'  # 'toy' has no triton: automatic choice
    assert pick(names=('torch', 'triton')) == 'triton'
    with use_backend('flash'):  # the context applies where the op has the name ...
        assert pick(names=('torch', 'triton')) == 'triton'  # ... else the variable


def test_per_op_names(monkeypatch):
    monkeypatch.setenv(ENV, 'other=x, toy=torch')
    assert pick() == 'torch'
    assert pick(op='other', names=('x', 'y')) == 'x'
    monkeypatch.setenv(ENV, 'torch,toy=fast')  # per-op beats one-for-all
    assert pick() == 'fast'
    assert pick(op='other', names=('torch', )) == 'torch'


def test_unknown_name_says_op_source_and_choices(monkeypatch):
    monkeypatch.setenv(ENV, 'toy=bogus')
    with pytest.raises(UnknownBackendError) as err:
        pick()
    assert isinstance(err.value, KeyError) and isinstance(err.value, ValueError)
    assert str(err.value) == ("unknown toy backend 'bogus' (from MMHYBRID_BACKEND "
                              "(toy=bogus)); use one of ['fast', 'torch'] or auto")
    with pytest.raises(UnknownBackendError, match=r"'nope' \(from backend=\)"):
        pick('nope')
    with use_backend(toy='nope'), pytest.raises(UnknownBackendError,
                                                match=r'from use_backend'):
        pick()


def test_every_op_follows_the_rule(monkeypatch):
    """Every op with backends names itself in per-op overrides: forcing a name it
    lacks raises, naming the op; 'torch' runs everywhere on CPU."""
    x = torch.randn(1, 2, 9, 4)
    w = torch.zeros(4)
    calls = {
        'bi_wkv': lambda: ops.bi_wkv(w, w, x[0], x[0]),
        'effatt': lambda: ops.effatt(x, x, x),
        'linear_infsa': lambda: ops.linear_infsa(x, x, x),
        'pure_infsa': lambda: ops.pure_infsa(x, x, x),
        'softmax_attention': lambda: ops.softmax_attention(x, x, x),
        'historical_attention': lambda: ops.historical_attention(x, x, x),
        'sliding_window_attention': lambda: ops.sliding_window_attention(
            x, x, x, (3, 3), 3),
        'gated_delta_rule': lambda: ops.gated_delta_rule(
            x, x, x, -torch.rand(1, 2, 9), torch.rand(1, 2, 9)),
    }
    for op, call in calls.items():
        with use_backend('torch'):
            call()
        with use_backend(**{op: 'bogus'}), pytest.raises(UnknownBackendError,
                                                          match=f'unknown {op} '):
            call()
        monkeypatch.setenv(ENV, f'{op}=bogus')
        with pytest.raises(UnknownBackendError, match=f'unknown {op} '):
            call()
        monkeypatch.delenv(ENV)


def test_retired_variables_warn_at_import():
    """The five per-op variables of earlier versions are named in a warning."""
    code = ('import importlib.util, warnings; warnings.simplefilter("error"); '
            f'spec = importlib.util.spec_from_file_location("d", {dispatch.__file__!r}); '
            'spec.loader.exec_module(importlib.util.module_from_spec(spec))')
    for env, fails in (({'MMHYBRID_WKV_BACKEND': 'torch'}, True), ({}, False)):
        proc = subprocess.run([sys.executable, '-c', code], env=env,
                              capture_output=True, text=True)
        assert (proc.returncode != 0) == fails, proc.stderr
        assert ('MMHYBRID_WKV_BACKEND no longer' in proc.stderr) == fails
