"""mmhybrid: hybrid and linear-attention vision backbones for OpenMMLab."""
from .version import __version__
from .utils.atomic_checkpoint import patch_mmengine_checkpoint_saving
from .utils.checkpoint_compat import patch_mmengine_checkpoint_loading
from .utils.default_scope import disable_mmpretrain_multimodal

patch_mmengine_checkpoint_loading()
patch_mmengine_checkpoint_saving()
disable_mmpretrain_multimodal()

from . import ops  # noqa: E402,F401
from . import models  # noqa: E402,F401
from .models.backbones import list_archs  # noqa: E402

__all__ = ['__version__', 'list_archs']
