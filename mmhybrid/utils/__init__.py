from .checkpoint import (CheckpointError, find_latest_checkpoint, load_checkpoint,
                         resave_weights_only, trusted_path)
from .default_scope import register_scope
from .swap_backbone import swap_backbone

__all__ = ['CheckpointError', 'find_latest_checkpoint', 'load_checkpoint',
           'resave_weights_only', 'trusted_path', 'register_scope', 'swap_backbone']
