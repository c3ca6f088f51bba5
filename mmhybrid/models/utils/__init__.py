from .checkpoint_formats import (FORMATS, Format, convert_checkpoint_file,
                                 convert_cswin, convert_state_dict, convert_swin,
                                 detect_format, extract_state_dict)
from .patch_embed import PatchEmbed, StemPadding
from mmhybrid.ops.pos_embed import (resize_pos_embed, resize_rel_pos_bias_table,
                                    square_grid)
from .pretrained import load_pretrained

__all__ = ['FORMATS', 'Format', 'convert_checkpoint_file', 'convert_cswin',
           'convert_state_dict', 'convert_swin', 'detect_format', 'extract_state_dict',
           'load_pretrained', 'PatchEmbed', 'StemPadding', 'resize_pos_embed',
           'resize_rel_pos_bias_table', 'square_grid']
