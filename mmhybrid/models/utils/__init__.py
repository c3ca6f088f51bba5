from .official_checkpoints import (classifier_head, convert_checkpoint_file,
                                   convert_cswin, convert_swin,
                                   is_official_cswin, is_official_swin)
from .pos_embed import resize_pos_embed, square_grid
from .pretrained import load_pretrained

__all__ = ['resize_pos_embed', 'square_grid', 'load_pretrained', 'classifier_head',
           'convert_checkpoint_file', 'convert_cswin', 'convert_swin',
           'is_official_cswin', 'is_official_swin']
