"""``import mmhybrid`` registers modules and changes nothing else.

In a fresh interpreter every attribute of mmengine's runner, checkpoint, file
backend, hook and config modules and classes must be the very same object before
and after ``import mmhybrid`` (and after building a model and our checkpoint
hook). Among them, what earlier versions replaced at import:

* ``mmengine.runner.checkpoint.CheckpointLoader``'s local-file scheme (``''``);
* ``save_checkpoint`` in ``mmengine.runner``, ``mmengine.runner.checkpoint`` and
  ``mmengine.runner.runner``; ``Runner.resume``;
* ``LocalBackend.put``; ``CheckpointHook._save_checkpoint_with_step``;
* ``find_latest_checkpoint`` in ``mmengine.runner``, ``mmengine.runner.checkpoint``,
  ``mmengine.runner.runner`` and ``mmengine.runner._flexible_runner``;
* ``mmengine.config.utils._get_cfg_metainfo``, ``mmengine.config.config.is_installed``.

Registries may gain entries (our models, hooks and storage backend, and the
``trusted://`` scheme of ``CheckpointLoader``, added through its
``register_scheme``, which rebuilds its ``_schemes`` dict in order), never lose or
change one.
"""
import subprocess
import sys

SCRIPT = r'''
import importlib

MODULES = ['mmengine.runner', 'mmengine.runner.checkpoint', 'mmengine.runner.runner',
           'mmengine.runner._flexible_runner',
           'mmengine.fileio.backends.local_backend', 'mmengine.fileio.io',
           'mmengine.hooks.checkpoint_hook', 'mmengine.config.config',
           'mmengine.config.utils']
CLASSES = [('mmengine.runner', 'Runner'), ('mmengine.runner', 'FlexibleRunner'),
           ('mmengine.fileio', 'LocalBackend'), ('mmengine.hooks', 'CheckpointHook'),
           ('mmengine.runner.checkpoint', 'CheckpointLoader')]
PATCHED_BEFORE = [
    "CheckpointLoader._schemes['']", 'mmengine.runner.save_checkpoint',
    'mmengine.runner.checkpoint.save_checkpoint',
    'mmengine.runner.runner.save_checkpoint',
    'mmengine.runner.Runner.resume', 'mmengine.fileio.LocalBackend.put',
    'mmengine.hooks.CheckpointHook._save_checkpoint_with_step',
    'mmengine.runner.find_latest_checkpoint',
    'mmengine.runner.checkpoint.find_latest_checkpoint',
    'mmengine.runner.runner.find_latest_checkpoint',
    'mmengine.runner._flexible_runner.find_latest_checkpoint',
    'mmengine.config.utils._get_cfg_metainfo', 'mmengine.config.config.is_installed']


def snapshot():
    from mmengine.fileio.backends import backends, prefix_to_backends
    from mmengine.runner.checkpoint import CheckpointLoader
    snap = {}
    for name in MODULES:
        for key, value in vars(importlib.import_module(name)).items():
            if not key.startswith('__'):
                snap[f'{name}.{key}'] = value
    for module, cls in CLASSES:
        for key, value in vars(getattr(importlib.import_module(module), cls)).items():
            if not key.startswith('__') and key != '_schemes':  # entries below
                snap[f'{module}.{cls}.{key}'] = value
    for key, value in CheckpointLoader._schemes.items():
        snap[f'CheckpointLoader._schemes[{key!r}]'] = value
    for key, value in backends.items():
        snap[f'backends[{key!r}]'] = value
    for key, value in prefix_to_backends.items():
        snap[f'prefix_to_backends[{key!r}]'] = value
    return snap


def changed(before, after):
    return sorted(k for k, v in before.items() if after.get(k, changed) is not v)


before = snapshot()
missing = [k for k in PATCHED_BEFORE if k not in before]
assert not missing, missing
import mmhybrid  # noqa: E402
from mmhybrid.registry import MODELS  # noqa: E402
MODELS.build(dict(type='SoLAVision', arch=dict(
    embed_dims=(16, 16, 32, 32), schedule='L/L/LS/S', hsb_routes=()), head_dim=16))
after_import = snapshot()
from mmengine.registry import HOOKS  # noqa: E402
hook = HOOKS.build(dict(type='mmhybrid.AtomicCheckpointHook', interval=1))
after_hook = snapshot()
print('checked', len(before))
print('import', changed(before, after_import))
print('hook', changed(before, after_hook))
print('new', sorted(set(after_hook) - set(before)))
'''


def test_import_mmhybrid_changes_no_mmengine_function():
    result = subprocess.run([sys.executable, '-c', SCRIPT], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = dict(line.split(' ', 1) for line in result.stdout.splitlines())
    assert int(lines['checked']) > 300  # the sweep saw the modules' contents
    assert lines['import'] == '[]'
    assert lines['hook'] == '[]'
    # what importing adds: the trusted:// scheme; registering our hook: the atomic
    # storage backend, by name only
    assert lines['new'] == ("[\"CheckpointLoader._schemes['trusted://']\", "
                            "\"backends['mmhybrid_atomic_local']\"]")
