"""mmhybrid's model registry.

Two OpenMMLab habits are supported from any caller scope (mmseg, mmdet, mmpretrain):

* ``type='mmhybrid.SoLAVision'``: mmengine imports ``mmhybrid.registry`` on demand and
  this registry imports its ``locations`` the first time it is queried, so no
  ``custom_imports`` is needed.
* ``type='SoLAVision'`` after ``custom_imports=dict(imports=['mmhybrid'])``: public
  models are also put in mmengine's root registry, which every scope searches last.

:data:`MIXERS` holds the token mixers every backbone builds its layers from, by
name (``'wkv'``, ``'softmax'``, ...); a mixer registered from a user's own file
stands in any backbone's ``mixers=`` (docs/contributing.md).
"""
from mmengine import registry as upstream
from mmengine.registry import Registry

MODELS = Registry('model', parent=upstream.MODELS, scope='mmhybrid',
                  locations=['mmhybrid.models'])
MIXERS = Registry('token mixer', scope='mmhybrid',
                  locations=['mmhybrid.layers.mixers'])
# configs name them ``type='mmhybrid.AtomicCheckpointHook'``
HOOKS = Registry('hook', parent=upstream.HOOKS, scope='mmhybrid',
                 locations=['mmhybrid.engine'])
OPTIM_WRAPPER_CONSTRUCTORS = Registry(
    'optimizer wrapper constructor', parent=upstream.OPTIM_WRAPPER_CONSTRUCTORS,
    scope='mmhybrid', locations=['mmhybrid.engine'])


def register_model(name=None):
    """Class decorator: register in mmhybrid's registry and expose to all scopes."""

    def _register(cls):
        MODELS.register_module(name=name, module=cls)
        upstream.MODELS.register_module(name=name, module=cls)
        return cls

    return _register


def build_model(cfg, **kwargs):
    """Build a config from mmhybrid's registry whatever the caller's default scope.

    mmengine switches to the caller's ``default_scope`` registry inside ``build``;
    naming the scope explicitly keeps sub-modules of ours resolvable under
    mmseg, mmdet or mmpretrain configs.
    """
    cfg = dict(cfg)
    cfg.setdefault('_scope_', 'mmhybrid')
    return MODELS.build(cfg, **kwargs)
