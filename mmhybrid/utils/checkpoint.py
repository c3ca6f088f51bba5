"""Checkpoints on torch >= 2.6: weights-only contents, atomic writes, a safe loader.

torch >= 2.6 loads with ``weights_only=True`` by default (tensors, numbers,
strings, containers: no file can run code); mmengine 0.10 training checkpoints
also hold ``HistoryBuffer`` objects and numpy values, which it refuses. Nothing
here changes mmengine; :class:`mmhybrid.engine.AtomicCheckpointHook` (named in
our config bases) writes checkpoints with :func:`atomic_write` in the form of
:func:`to_weights_only`, so ``torch.load``, mmseg's ``init_model`` and mmdet's
``init_detector`` read them anywhere. :func:`load_checkpoint` reads weights-only
with one clear error per bad file, downloads included; the user's own files may be
unpickled when named ``trusted://PATH``, a scheme registered with mmengine's
``CheckpointLoader`` (its extension point; no existing scheme changes) when this
module is imported, so the same spelling works in ``tools/``, ``load_from``,
``init_cfg`` Pretrained, ``mmseg.apis.init_model`` and ``mmdet.apis.init_detector``.
"""
import glob
import io
import os
import os.path as osp
import pickle
import tempfile
import zipfile
from collections import OrderedDict
from urllib.parse import urlparse

import numpy as np
import torch
from mmengine.logging import HistoryBuffer, print_log
from mmengine.runner.checkpoint import CheckpointLoader, _load_checkpoint_to_model

_TAG = '__mmhybrid__'
_TENSOR_KINDS = 'biuf'  # numpy dtypes stored as tensors; others as lists
TRUSTED_PREFIX = 'trusted://'


class CheckpointError(RuntimeError):
    """A checkpoint file that cannot (or may not) be loaded."""


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


def atomic_write(data, path):
    """Write ``data`` (bytes) to ``path`` so that ``path`` is never partial: a
    temporary ``.<name>.<random>.part`` in the same folder, fsync'ed, renamed onto
    ``path``, then the folder fsync'ed."""
    path = osp.realpath(path)
    directory = osp.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f'.{osp.basename(path)}.', suffix='.part',
                               dir=directory)
    try:
        with os.fdopen(fd, 'wb') as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    except BaseException:
        if osp.exists(tmp):
            os.unlink(tmp)
        raise
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def is_intact(path):
    """False for a missing, empty, truncated or CRC-failing checkpoint file.

    Files of torch's zip format are checked entry by entry; a directory (sharded
    checkpoints) or a legacy non-zip file is taken as is.
    """
    if osp.isdir(path):
        return True
    if not osp.isfile(path) or osp.getsize(path) == 0:
        return False
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip() is None
    except zipfile.BadZipFile:
        with open(path, 'rb') as f:
            return f.read(2) != b'PK'  # a zip that lost its end: truncated
    except (OSError, zipfile.LargeZipFile, RuntimeError, ValueError):
        return False


def find_latest_checkpoint(work_dir):
    """The checkpoint ``work_dir/last_checkpoint`` names if it is intact, else the
    newest intact ``*.pth`` of its folder or ``work_dir`` (with a warning); None if
    there is no checkpoint at all. What ``tools/train.py --resume`` resumes
    (mmengine's function of this name trusts the pointer)."""
    pointer = osp.join(work_dir, 'last_checkpoint')
    named = None
    if osp.isfile(pointer):
        with open(pointer) as f:
            named = f.read().strip() or None
    if named is not None and ('://' in named or is_intact(named)):
        return named
    folders = {work_dir, osp.dirname(named)} if named else {work_dir}
    files = sorted({p for folder in folders
                    for p in glob.glob(osp.join(folder, '*.pth'))},
                   key=osp.getmtime, reverse=True)
    intact = [p for p in files if is_intact(p)]
    if named is None and not osp.isfile(pointer) and not files:
        return None
    if not intact:
        raise RuntimeError(
            f'cannot resume from {work_dir}: {pointer} names {named!r} and no '
            f'intact checkpoint is there (damaged: {files}). Remove them to '
            'start afresh, or pass --resume CHECKPOINT.')
    print_log(f'{pointer} names {named!r}, which is missing or damaged; '
              f'resuming from the newest intact checkpoint {intact[0]}',
              logger='current', level=30)
    return intact[0]


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


def load_local_checkpoint(filename, map_location=None, trusted=False):
    """Load the local file ``filename`` weights-only and rebuild the tagged
    objects (:func:`from_weights_only`). A file that holds other Python objects
    is unpickled only when ``trusted`` (the user's own file: it may run code);
    empty, truncated and non-checkpoint files get their own error."""
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
        try:  # what the pickle needs beyond weights-only's allow-list
            unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(filename)
        except Exception:  # noqa: BLE001  (any parse failure: not a checkpoint)
            unsafe = None
        if not unsafe:
            raise _not_a_checkpoint(filename) from err
        if not trusted:
            unsafe = sorted(unsafe)
            shown = ', '.join(unsafe[:8]) + (', ...' if len(unsafe) > 8 else '')
            raise CheckpointError(
                f'checkpoint {filename} holds Python objects ({shown}) besides '
                'tensors and containers, so it was not unpickled (that could run '
                'code). Only if you made this file (e.g. mmengine\'s CheckpointHook '
                'wrote it): name it trusted://'
                f'{osp.abspath(filename)} (or resave it weights-only once with '
                'mmhybrid.utils.resave_weights_only(path))') from err
        try:
            checkpoint = torch.load(filename, map_location=map_location,
                                    weights_only=False)
        except Exception as full_err:  # noqa: BLE001
            raise _not_a_checkpoint(filename) from full_err
    except (RuntimeError, EOFError, OSError, ValueError) as err:
        raise _not_a_checkpoint(filename) from err
    return from_weights_only(checkpoint)


def _download(url):
    """The copy of ``url`` in torch.hub's checkpoint cache (where mmengine and
    ``torch.hub.load_state_dict_from_url`` keep it), downloaded once."""
    directory = osp.join(torch.hub.get_dir(), 'checkpoints')
    path = osp.join(directory, osp.basename(urlparse(url).path))
    if not osp.isfile(path):
        os.makedirs(directory, exist_ok=True)
        print_log(f'downloading {url} to {path}', logger='current')
        torch.hub.download_url_to_file(url, path)  # to a temporary file, then moved
    return path


def load_checkpoint(filename, map_location=None, logger='current'):
    """``CheckpointLoader.load_checkpoint`` (same arguments) with local files and
    ``http(s)://`` downloads read by :func:`load_local_checkpoint` (weights-only,
    untrusted: mmengine's http loader unpickles whatever it downloads) and
    ``trusted://PATH`` as the user's own file. Other schemes (``open-mmlab://``,
    ...) go to mmengine's loaders."""
    filename = str(filename)
    if filename.startswith(('http://', 'https://')):
        return load_local_checkpoint(_download(filename), map_location)
    if '://' in filename:
        return from_weights_only(CheckpointLoader.load_checkpoint(
            filename, map_location=map_location, logger=logger))
    return load_local_checkpoint(filename, map_location)


def load_from_trusted(filename, map_location=None):
    """The loader of the ``trusted://`` scheme: the local file after it, fully
    unpickled if it has to be."""
    path = filename[len(TRUSTED_PREFIX):]
    if '://' in path:
        raise CheckpointError(
            f'{filename}: trusted:// names a local file you made; a download is '
            f'always loaded weights-only: give {path} without trusted://')
    return load_local_checkpoint(path, map_location, trusted=True)


CheckpointLoader.register_scheme(TRUSTED_PREFIX, load_from_trusted, force=True)


def trusted_path(path):
    """``trusted://PATH`` (absolute) for your own checkpoint ``PATH``: every loader
    (the Runner's ``load_from`` and ``resume``, ``init_cfg`` Pretrained,
    ``init_model``, ``tools/``) then reads it even if it holds Python objects (e.g.
    written by mmengine's own ``CheckpointHook``). A path already so named is
    returned as it is."""
    path = os.fspath(path)
    if path.startswith(TRUSTED_PREFIX):
        return path
    return TRUSTED_PREFIX + osp.abspath(osp.expanduser(path))


def load_model_checkpoint(model, filename, map_location='cpu', strict=False,
                          revise_keys=((r'^module\.', ''), )):
    """mmengine's ``load_checkpoint(model, filename, ...)`` (same arguments and
    result: the checkpoint) with the file read by :func:`load_checkpoint`: a local
    file or download weights-only, ``trusted://PATH`` as your own file."""
    checkpoint = load_checkpoint(filename, map_location)
    return _load_checkpoint_to_model(model, checkpoint, strict,
                                     revise_keys=list(revise_keys))


def resave_weights_only(filename, out=None):
    """Rewrite your own checkpoint ``filename`` (trusted: it is fully unpickled) in
    the weights-only form, atomically, to ``out`` or in place; returns the path."""
    checkpoint = load_local_checkpoint(filename, map_location='cpu', trusted=True)
    out = out or filename
    buffer = io.BytesIO()
    torch.save(to_weights_only(checkpoint), buffer)
    atomic_write(buffer.getvalue(), out)
    return out
