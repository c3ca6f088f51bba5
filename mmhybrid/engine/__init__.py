"""Training-loop parts registered in mmengine's registries (scope ``mmhybrid``)."""
from .hooks import AtomicCheckpointHook
from .optim_wrapper_constructor import PlainGroupsOptimWrapperConstructor

__all__ = ['AtomicCheckpointHook', 'PlainGroupsOptimWrapperConstructor']
