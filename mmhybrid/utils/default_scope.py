"""Register the OpenMMLab package a config is written for (its default scope)."""
import importlib


def register_scope(scope):
    """Import and register all modules of ``scope`` ('mmseg', 'mmdet' or
    'mmpretrain'; others are left alone)."""
    if scope in ('mmseg', 'mmdet', 'mmpretrain'):
        importlib.import_module(f'{scope}.utils').register_all_modules(
            init_default_scope=False)
