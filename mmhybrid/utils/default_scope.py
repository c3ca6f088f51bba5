"""Register the OpenMMLab package a config is written for (its default scope)."""
import importlib

SCOPES = ('mmseg', 'mmdet', 'mmpretrain')


def register_scope(scope):
    """Import and register all modules of ``scope`` ('mmseg', 'mmdet', ...)."""
    if scope not in SCOPES:
        return
    importlib.import_module(f'{scope}.utils').register_all_modules(
        init_default_scope=False)


def setup_config_scope(cfg):
    """Register the modules of ``cfg.default_scope`` and return the scope."""
    scope = cfg.get('default_scope', 'mmengine')
    register_scope(scope)
    return scope
