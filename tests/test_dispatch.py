"""The backend choice every op shares (mmhybrid.ops.dispatch)."""
import pytest

from mmhybrid.ops.dispatch import (BackendRegistry, UnknownBackendError,
                                   choose_backend)


def test_argument_then_environment_then_auto(monkeypatch):
    monkeypatch.delenv('MMHYBRID_TEST_BACKEND', raising=False)
    pick = lambda backend=None: choose_backend(  # noqa: E731
        'toy', ('a', 'b'), lambda: 'a', backend, 'MMHYBRID_TEST_BACKEND')
    assert pick() == 'a'
    monkeypatch.setenv('MMHYBRID_TEST_BACKEND', ' B ')
    assert pick() == 'b'
    assert pick('a') == 'a'
    monkeypatch.setenv('MMHYBRID_TEST_BACKEND', 'auto')
    assert pick() == 'a'


def test_unknown_name_says_op_source_and_choices(monkeypatch):
    monkeypatch.setenv('MMHYBRID_TEST_BACKEND', 'bogus')
    with pytest.raises(UnknownBackendError) as err:
        choose_backend('toy', ('a', 'b'), lambda: 'a', None, 'MMHYBRID_TEST_BACKEND')
    assert isinstance(err.value, KeyError) and isinstance(err.value, ValueError)
    assert str(err.value) == ("unknown toy backend 'bogus' (from backend= or "
                              "MMHYBRID_TEST_BACKEND); use one of ['a', 'b'] or auto")


def test_registry_defaults_per_device():
    registry = BackendRegistry('toy', {'chunk': len})
    assert registry.lookup('cuda') is len
    registry.register('fast', abs, default_for=('cuda', ))
    assert registry.lookup('cuda') is abs and registry.lookup('cpu') is len
    assert registry.lookup('cuda', 'chunk') is len
    assert registry.names() == ['chunk', 'fast']
    with pytest.raises(KeyError, match="unknown toy backend 'nope'"):
        registry.lookup('cpu', 'nope')
