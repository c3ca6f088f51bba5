from .layer_pairs import blocks_per_stage, pair_layers
from .linearization import LinearizationDistiller

__all__ = ['LinearizationDistiller', 'blocks_per_stage', 'pair_layers']
