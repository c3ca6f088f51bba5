"""Checkpoints on torch >= 2.6: written weights-only-loadable, read safely.

torch >= 2.6 loads with ``weights_only=True`` by default, which refuses anything but
tensors, primitive types and containers, so no file can run code. mmengine 0.10
training checkpoints hold ``HistoryBuffer`` objects and numpy arrays/scalars
(the message hub), so upstream ``--resume``, ``mmseg.apis.init_model`` and mmdet's
``init_detector`` refuse them. ``import mmhybrid`` installs two symmetric fixes:

* **Writing**: every checkpoint mmengine's runners save is first converted by
  :func:`to_weights_only` (a ``HistoryBuffer``, numpy array or scalar becomes a
  tagged dict of tensors and numbers), so ``torch.load(weights_only=True)`` reads
  it anywhere, with or without mmhybrid.
* **Reading** (mmengine's local-file loader): weights-only first;
  :func:`from_weights_only` rebuilds the tagged objects (from data only: no code
  runs). A file that still holds other Python objects (e.g. written before this
  fix) is fully unpickled only inside :func:`trusted_checkpoints` (``--resume``,
  ``tools/test.py``'s checkpoint) or with ``MMHYBRID_TRUST_CHECKPOINTS=1``;
  empty, truncated and non-checkpoint files get their own error.
"""
import contextlib
import contextvars
import functools
import os
import os.path as osp
import pickle
import zipfile
from collections import OrderedDict

import mmengine.runner
import numpy as np
import torch
from mmengine.logging import HistoryBuffer
from mmengine.runner import Runner
from mmengine.runner import checkpoint as mmengine_checkpoint
from mmengine.runner import runner as mmengine_runner
from mmengine.runner.checkpoint import CheckpointLoader

TRUST_ENV = 'MMHYBRID_TRUST_CHECKPOINTS'
_TAG = '__mmhybrid__'
# numpy dtypes stored as tensors; others (strings, objects) as lists
_TENSOR_KINDS = 'biuf'
_TRUSTED = contextvars.ContextVar('mmhybrid_trusted_checkpoints', default=False)


class CheckpointError(RuntimeError):
    """A checkpoint file that cannot (or may not) be loaded."""


@contextlib.contextmanager
def trusted_checkpoints():
    """Within this context local checkpoints that hold Python objects other than
    tensors and containers are fully unpickled (which may run code)."""
    token = _TRUSTED.set(True)
    try:
        yield
    finally:
        _TRUSTED.reset(token)


def _is_trusted():
    return _TRUSTED.get() or os.environ.get(TRUST_ENV) == '1'


def _map_values(obj, fn):
    """``obj`` (a dict, list or tuple) with ``fn`` applied to its values: the same
    object when nothing changes, else a plain dict / OrderedDict / list / tuple
    (what weights-only loading accepts) keeping a state dict's ``_metadata``."""
    if isinstance(obj, dict):
        items = [(k, fn(v)) for k, v in obj.items()]
        if type(obj) in (dict, OrderedDict) and all(
                new is old for (_, new), old in zip(items, obj.values())):
            return obj
        if not isinstance(obj, OrderedDict):
            return dict(items)
        out = OrderedDict(items)
        if hasattr(obj, '_metadata'):  # module versions read by load_state_dict
            out._metadata = obj._metadata
        return out
    values = [fn(v) for v in obj]
    if type(obj) in (list, tuple) and all(a is b for a, b in zip(values, obj)):
        return obj
    return tuple(values) if isinstance(obj, tuple) else values


def to_weights_only(obj):
    """``obj`` with every ``HistoryBuffer``, numpy array and numpy scalar replaced
    by a tagged dict of tensors and numbers (see :func:`from_weights_only`);
    containers are copied only where something inside changes."""
    if isinstance(obj, HistoryBuffer):
        log, count = obj.data
        return {_TAG: 'HistoryBuffer', 'log_history': to_weights_only(log),
                'count_history': to_weights_only(count), 'max_length': obj.max_length}
    if isinstance(obj, np.ndarray):
        data = (torch.from_numpy(np.ascontiguousarray(obj)) if obj.dtype.kind in
                _TENSOR_KINDS and obj.dtype.isnative else obj.tolist())
        return {_TAG: 'ndarray', 'dtype': obj.dtype.str, 'data': data}
    if isinstance(obj, np.generic):
        return {_TAG: 'numpy_scalar', 'dtype': obj.dtype.str, 'value': obj.item()}
    if isinstance(obj, (dict, list, tuple)):
        return _map_values(obj, to_weights_only)
    return obj


def from_weights_only(obj):
    """Inverse of :func:`to_weights_only`; untagged data passes through."""
    if isinstance(obj, dict):
        tag = obj.get(_TAG)
        if tag == 'HistoryBuffer':
            return HistoryBuffer(from_weights_only(obj['log_history']),
                                 from_weights_only(obj['count_history']),
                                 obj['max_length'])
        if tag == 'ndarray':
            data = obj['data']
            data = data.numpy() if isinstance(data, torch.Tensor) else data
            return np.asarray(data, dtype=np.dtype(obj['dtype']))
        if tag == 'numpy_scalar':
            return np.dtype(obj['dtype']).type(obj['value'])
    if isinstance(obj, (dict, list, tuple)):
        return _map_values(obj, from_weights_only)
    return obj


def _not_a_checkpoint(filename):
    """Why ``filename`` is not a readable torch checkpoint, with the fix (the
    error torch raised is chained to it)."""
    with open(filename, 'rb') as f:
        head = f.read(16)
    if zipfile.is_zipfile(filename) or head.startswith(b'PK'):
        why = ('is truncated or corrupt (its zip archive cannot be read: an '
               'interrupted save, download or copy?)')
    elif head.lstrip().startswith(b'<'):
        why = 'is not a checkpoint but text/HTML (a failed download?)'
    elif len(head) > 8 and head[8:9] == b'{':
        why = ('is a safetensors file, not a torch checkpoint: convert it with '
               'safetensors.torch.load_file + torch.save')
    else:
        why = (f'is not a torch checkpoint or is corrupt (it starts with '
               f'{head[:8]!r})')
    return CheckpointError(f'checkpoint {filename} {why}; save or download it again')


def _unsafe_globals(filename):
    """Classes/functions a checkpoint's pickle needs beyond weights-only's
    allow-list (read without unpickling), or None when it is no checkpoint."""
    try:
        return torch.serialization.get_unsafe_globals_in_checkpoint(filename)
    except Exception:  # noqa: BLE001  (any parse failure: not a checkpoint)
        return None


def load_from_local(filename, map_location=None):
    """Replacement for mmengine's ``load_from_local`` scheme (see module doc;
    mmengine names the backend in its log from this function's name)."""
    filename = osp.expanduser(filename)
    if not osp.isfile(filename):
        raise FileNotFoundError(f'checkpoint {filename} does not exist (working '
                                f'directory: {os.getcwd()})')
    if osp.getsize(filename) == 0:
        raise CheckpointError(f'checkpoint {filename} is empty (0 bytes): an '
                              'interrupted save or download; save or download it '
                              'again')
    try:
        checkpoint = torch.load(filename, map_location=map_location,
                                weights_only=True)
    except pickle.UnpicklingError as err:
        unsafe = _unsafe_globals(filename)
        if not unsafe:
            raise _not_a_checkpoint(filename) from err
        if not _is_trusted():
            unsafe = sorted(unsafe)
            shown = ', '.join(unsafe[:8]) + (', ...' if len(unsafe) > 8 else '')
            raise CheckpointError(
                f'checkpoint {filename} holds Python objects ({shown}) besides '
                'tensors and containers, so it was not unpickled (that could run '
                'code). Only if you made this file (e.g. an mmengine training '
                'checkpoint from before mmhybrid wrote weights-only ones): resume '
                'it with --resume, test it with tools/test.py, set '
                f'{TRUST_ENV}=1, or re-save it with '
                'mmhybrid.utils.resave_weights_only(path).') from err
        try:
            checkpoint = torch.load(filename, map_location=map_location,
                                    weights_only=False)
        except Exception as full_err:  # noqa: BLE001
            raise _not_a_checkpoint(filename) from full_err
    except (RuntimeError, EOFError, OSError, ValueError) as err:
        raise _not_a_checkpoint(filename) from err
    return from_weights_only(checkpoint)


def resave_weights_only(filename, out=None):
    """Rewrite your own checkpoint ``filename`` (trusted: it is fully unpickled) in
    the weights-only form, to ``out`` or in place; returns the path written."""
    with trusted_checkpoints():
        checkpoint = load_from_local(filename, map_location='cpu')
    out = out or filename
    torch.save(to_weights_only(checkpoint), out)
    return out


def _weights_only_saver(save):
    @functools.wraps(save)
    def save_weights_only(checkpoint, filename, *args, **kwargs):
        return save(to_weights_only(checkpoint), filename, *args, **kwargs)

    save_weights_only._mmhybrid_weights_only = True
    return save_weights_only


def _trusted_method(method):
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        with trusted_checkpoints():
            return method(*args, **kwargs)
    wrapper._mmhybrid_trusted = True
    return wrapper


def patch_mmengine_checkpoint_loading():
    """Install the local-file loader, weights-only saving of the runners'
    checkpoints, and trust ``Runner.resume`` (idempotent)."""
    CheckpointLoader.register_scheme(prefixes='', force=True)(load_from_local)
    # Runner imported the function by name, strategies import it from the module
    for module in (mmengine_checkpoint, mmengine_runner, mmengine.runner):
        if not getattr(module.save_checkpoint, '_mmhybrid_weights_only', False):
            module.save_checkpoint = _weights_only_saver(module.save_checkpoint)
    if not getattr(Runner.resume, '_mmhybrid_trusted', False):
        Runner.resume = _trusted_method(Runner.resume)
