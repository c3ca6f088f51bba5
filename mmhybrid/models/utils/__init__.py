from .pos_embed import resize_pos_embed, square_grid
from .pretrained import load_pretrained

__all__ = ['resize_pos_embed', 'square_grid', 'load_pretrained']
