from .checkpoint_compat import (patch_mmengine_checkpoint_loading,
                                trusted_checkpoints)

__all__ = ['patch_mmengine_checkpoint_loading', 'trusted_checkpoints']
