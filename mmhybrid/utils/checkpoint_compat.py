"""Checkpoint loading for mmengine 0.10.x on torch >= 2.6.

mmengine calls ``torch.load`` without ``weights_only``; torch >= 2.6 defaults it to
True, and the checkpoints mmengine writes hold more than tensors (``HistoryBuffer``,
numpy arrays and dtypes), so ``--resume`` fails with ``Weights only load failed``.

The fix keeps the safe default: a checkpoint is loaded with ``weights_only=True``
(no code can run) unless it is loaded inside :func:`trusted_checkpoints`, which
mmhybrid uses only for files the user produced: resuming a run, and the checkpoint
named on ``tools/test.py``'s command line. ``MMHYBRID_TRUST_CHECKPOINTS=1`` trusts
every local file (e.g. ``load_from`` of your own full training checkpoint).
"""
import contextlib
import contextvars
import functools
import os
import os.path as osp
import pickle

import torch
from mmengine.runner import Runner
from mmengine.runner.checkpoint import CheckpointLoader

_TRUSTED = contextvars.ContextVar('mmhybrid_trusted_checkpoints', default=False)


@contextlib.contextmanager
def trusted_checkpoints():
    """Within this context local checkpoints are fully unpickled (may run code)."""
    token = _TRUSTED.set(True)
    try:
        yield
    finally:
        _TRUSTED.reset(token)


def _is_trusted():
    return _TRUSTED.get() or os.environ.get('MMHYBRID_TRUST_CHECKPOINTS') == '1'


def load_local_checkpoint(filename, map_location=None):
    """Replacement for mmengine's ``load_from_local`` scheme."""
    filename = osp.expanduser(filename)
    if not osp.isfile(filename):
        raise FileNotFoundError(f'{filename} can not be found.')
    trusted = _is_trusted()
    try:
        return torch.load(
            filename, map_location=map_location, weights_only=not trusted)
    except pickle.UnpicklingError as err:
        raise RuntimeError(
            f'{filename} holds objects other than tensors and containers, so it '
            'was not unpickled (that could run code). If you made this file '
            '(e.g. a full mmengine training checkpoint), resume with --resume, '
            'test it with tools/test.py, or set MMHYBRID_TRUST_CHECKPOINTS=1.'
        ) from err


def _trusted_method(method):

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        with trusted_checkpoints():
            return method(*args, **kwargs)

    wrapper._mmhybrid_trusted = True
    return wrapper


def patch_mmengine_checkpoint_loading():
    """Install the local-file loader and trust ``Runner.resume`` (idempotent)."""
    CheckpointLoader.register_scheme(prefixes='', force=True)(load_local_checkpoint)
    if not getattr(Runner.resume, '_mmhybrid_trusted', False):
        Runner.resume = _trusted_method(Runner.resume)
