"""mmengine's ``CheckpointHook`` with checkpoints that are whole or absent and load
weights-only anywhere (:mod:`mmhybrid.utils.checkpoint`); our config bases name it.

mmengine 0.10 writes a checkpoint in place and, with ``max_keep_ckpts``, removes
the oldest one *before* writing the new: a process killed while saving leaves a
truncated file and, with ``max_keep_ckpts=1``, no intact one. This hook writes
through :class:`AtomicLocalBackend` and removes outdated checkpoints only after
the new one and ``last_checkpoint`` are written.
"""
import contextlib

from mmengine.fileio import LocalBackend, register_backend
from mmengine.hooks import CheckpointHook

from mmhybrid.registry import HOOKS
from mmhybrid.utils.checkpoint import (atomic_write, from_weights_only,
                                       to_weights_only)

ATOMIC_BACKEND = 'mmhybrid_atomic_local'


class AtomicLocalBackend(LocalBackend):
    """mmengine's local file backend whose writes are atomic."""

    def put(self, obj, filepath):
        atomic_write(obj, str(filepath))

    def put_text(self, obj, filepath, encoding='utf-8'):
        atomic_write(obj.encode(encoding), str(filepath))


register_backend(ATOMIC_BACKEND, AtomicLocalBackend)


class _DeferredRemovals:
    """A file backend whose ``remove`` / ``rmtree`` wait until :meth:`flush`."""

    def __init__(self, backend):
        self._backend = backend
        self._pending = []

    def __getattr__(self, name):
        if name in ('remove', 'rmtree'):
            return lambda path: self._pending.append((getattr(self._backend, name), path))
        return getattr(self._backend, name)

    def flush(self):
        for action, path in self._pending:
            action(path)


@HOOKS.register_module()
class AtomicCheckpointHook(CheckpointHook):
    """``CheckpointHook`` (same arguments) with atomic, weights-only checkpoints;
    remote ``out_dir`` or explicit ``backend_args`` keep mmengine's backends."""

    def __init__(self, *args, backend_args=None, **kwargs):
        out_dir = kwargs.get('out_dir')
        if (backend_args is None and kwargs.get('file_client_args') is None
                and '://' not in str(out_dir or '')):
            backend_args = dict(backend=ATOMIC_BACKEND)
        super().__init__(*args, backend_args=backend_args, **kwargs)

    @contextlib.contextmanager
    def _removals_after_saving(self):
        backend = self.file_backend
        deferred = self.file_backend = _DeferredRemovals(backend)
        try:
            yield
        finally:
            self.file_backend = backend
        deferred.flush()

    def _save_checkpoint_with_step(self, runner, step, meta):
        with self._removals_after_saving():
            super()._save_checkpoint_with_step(runner, step, meta)

    def _save_best_checkpoint(self, runner, metrics):
        with self._removals_after_saving():
            super()._save_best_checkpoint(runner, metrics)

    def before_save_checkpoint(self, runner, checkpoint):
        checkpoint.update(to_weights_only(checkpoint))

    def after_load_checkpoint(self, runner, checkpoint):
        checkpoint.update(from_weights_only(checkpoint))
