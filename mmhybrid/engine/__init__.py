"""Training-loop parts registered in mmengine's registries (scope ``mmhybrid``)."""
from .hooks import AtomicCheckpointHook

__all__ = ['AtomicCheckpointHook']
