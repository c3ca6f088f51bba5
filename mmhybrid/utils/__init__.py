from .checkpoint import (CheckpointError, find_latest_checkpoint, load_checkpoint,
                         load_model_checkpoint, resave_weights_only, trusted_path)
from .default_scope import register_scope
from .swap_backbone import check_backbone_widths, swap_backbone

__all__ = ['CheckpointError', 'find_latest_checkpoint', 'load_checkpoint',
           'load_model_checkpoint', 'resave_weights_only', 'trusted_path',
           'register_scope', 'check_backbone_widths', 'swap_backbone']
