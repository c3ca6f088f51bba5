"""Interpreter-start hook of mmhybrid's venv (a ``.pth`` line written by
tools/setup_env.sh): plain mmseg/mmdet/mmpretrain work without ``import mmhybrid``.

mmpretrain 1.2.0 switches its multimodal models on whenever transformers >= 4.28
is installed, and they fail to import with transformers >= 5 (``TypeError:
NoneType takes no arguments``, their BERT code); mmseg and mmdet import
mmpretrain, so with transformers in the venv (diffusers' text encoders need it)
``register_all_modules()`` fails. No transformers release satisfies both
mmpretrain's multimodal code (< 5) and diffusers 0.42 (huggingface-hub >= 1.32,
which transformers 4.x excludes). This hook puts one finder on ``sys.meta_path``
that, right after ``mmpretrain.utils.dependency`` runs, sets its
``WITH_MULTIMODAL = False`` when the installed transformers is >= 5; nothing is
imported at start-up and nothing else is changed.
"""
import importlib.abc
import importlib.machinery
import sys

TARGET = 'mmpretrain.utils.dependency'


def multimodal_breaks():
    """True when mmpretrain 1.2.0's multimodal models cannot import."""
    try:
        from importlib.metadata import version
        return int(version('transformers').split('.')[0]) >= 5
    except Exception:  # noqa: BLE001  (no transformers, odd version string)
        return False


class MultimodalSwitch(importlib.abc.MetaPathFinder):
    """Finds ``TARGET`` like the path finder, then switches multimodal off."""

    def find_spec(self, name, path=None, target=None):
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            if multimodal_breaks():
                module.WITH_MULTIMODAL = False

        spec.loader.exec_module = exec_module
        return spec


if not any(type(f).__name__ == 'MultimodalSwitch' for f in sys.meta_path):
    sys.meta_path.insert(0, MultimodalSwitch())
