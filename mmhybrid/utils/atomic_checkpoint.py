"""Checkpoints that are whole or absent (mmengine 0.10.x).

mmengine writes a checkpoint in place, and with ``max_keep_ckpts`` it removes the
oldest kept checkpoint *before* writing the new one. A process killed while
saving leaves a truncated file and, with ``max_keep_ckpts=1``, no intact one;
``last_checkpoint`` (what ``--resume`` reads) then names a deleted file.

:func:`patch_mmengine_checkpoint_saving` (run by ``import mmhybrid``, so it also
covers upstream configs trained with our tools or importing mmhybrid) makes:

* every local file mmengine writes through its file backend -- checkpoints
  included -- go to a temporary file in the same folder, fsync'ed, then
  ``os.replace``'d onto the name (and the folder fsync'ed): a reader sees the old
  file or the new one, never a part;
* ``CheckpointHook`` remove outdated checkpoints only after the new one and the
  ``last_checkpoint`` pointer are written;
* auto-resume skip a pointer to a missing or damaged file (truncated, failing its
  zip CRCs) and take the newest intact checkpoint of that folder, with a warning.
"""
import functools
import glob
import os
import os.path as osp
import tempfile
import zipfile

import mmengine.runner
import mmengine.runner.checkpoint
from mmengine.fileio.backends import LocalBackend
from mmengine.hooks import CheckpointHook
from mmengine.logging import print_log

_UMASK = os.umask(0)
os.umask(_UMASK)


def _fsync_dir(directory):
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(data, path):
    """Write ``data`` (bytes) to ``path`` so that ``path`` is never partial."""
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
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException:
        if osp.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)


def _atomic_put(self, obj, filepath):
    atomic_write(obj, str(filepath))


class _DeferredRemovals:
    """A file backend whose ``remove`` / ``rmtree`` wait until :meth:`flush`."""

    def __init__(self, backend):
        self._backend = backend
        self._pending = []

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def remove(self, path):
        self._pending.append(functools.partial(self._backend.remove, path))

    def rmtree(self, path):
        self._pending.append(functools.partial(self._backend.rmtree, path))

    def flush(self):
        for action in self._pending:
            action()


def _remove_old_after_saving(save):

    @functools.wraps(save)
    def wrapper(self, runner, step, meta):
        backend = self.file_backend
        deferred = _DeferredRemovals(backend)
        self.file_backend = deferred
        try:
            save(self, runner, step, meta)
        finally:
            self.file_backend = backend
        deferred.flush()

    wrapper._mmhybrid_atomic = True
    return wrapper


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


def find_latest_checkpoint(path):
    """The checkpoint ``last_checkpoint`` of ``path`` names if it is intact,
    else the newest intact ``*.pth`` of its folder or ``path``; None if there is
    no checkpoint at all.

    Replaces mmengine's function of the same name (auto-resume).
    """
    pointer = osp.join(path, 'last_checkpoint')
    named = None
    if osp.isfile(pointer):
        with open(pointer) as f:
            named = f.read().strip() or None
    if named is not None and ('://' in named or is_intact(named)):
        return named
    folders = {path, osp.dirname(named)} if named else {path}
    files = sorted({p for folder in folders
                    for p in glob.glob(osp.join(folder, '*.pth'))},
                   key=osp.getmtime, reverse=True)
    intact = [p for p in files if is_intact(p)]
    if named is None and not osp.isfile(pointer) and not files:
        print_log(f'no checkpoint to resume in {path}', logger='current')
        return None
    if not intact:
        raise RuntimeError(
            f'cannot resume from {path}: {pointer} names {named!r} and no '
            f'intact checkpoint is there (damaged: {files}). Remove them to '
            'start afresh, or pass --resume CHECKPOINT.')
    print_log(f'{pointer} names {named!r}, which is missing or damaged; '
              f'resuming from the newest intact checkpoint {intact[0]}',
              logger='current', level=30)
    return intact[0]


def patch_mmengine_checkpoint_saving():
    """Install atomic writes, late removals and the checked resume (idempotent)."""
    LocalBackend.put = _atomic_put
    save = CheckpointHook._save_checkpoint_with_step
    if not getattr(save, '_mmhybrid_atomic', False):
        CheckpointHook._save_checkpoint_with_step = _remove_old_after_saving(save)
    from mmengine.runner import _flexible_runner, runner
    for module in (mmengine.runner, mmengine.runner.checkpoint, runner,
                   _flexible_runner):
        module.find_latest_checkpoint = find_latest_checkpoint
