from .checkpoint_compat import (CheckpointError, patch_mmengine_checkpoint_loading,
                                resave_weights_only, trusted_checkpoints)
from .config import build_runner, load_config, merge_cfg_options, set_data_root
from .default_scope import register_scope, setup_config_scope
from .swap_backbone import swap_backbone

__all__ = ['CheckpointError', 'patch_mmengine_checkpoint_loading',
           'resave_weights_only', 'trusted_checkpoints',
           'build_runner', 'load_config', 'merge_cfg_options', 'set_data_root',
           'register_scope', 'setup_config_scope', 'swap_backbone']
