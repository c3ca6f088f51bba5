"""Register the OpenMMLab package a config is written for (its default scope)."""
import importlib

SCOPES = ('mmseg', 'mmdet', 'mmpretrain')


def disable_mmpretrain_multimodal():
    """mmpretrain's multimodal models fail to import with transformers 5.x.

    mmpretrain switches them on whenever ``transformers`` is installed (diffusers
    needs it); they must be switched off before ``mmpretrain.models`` is imported,
    which mmseg and mmdet also import. Called by ``import mmhybrid``.
    """
    try:
        from mmpretrain.utils import dependency
    except ImportError:
        return
    dependency.WITH_MULTIMODAL = False


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
