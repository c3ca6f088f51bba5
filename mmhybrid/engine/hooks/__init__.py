from .checkpoint_hook import AtomicCheckpointHook, AtomicLocalBackend

__all__ = ['AtomicCheckpointHook', 'AtomicLocalBackend']
