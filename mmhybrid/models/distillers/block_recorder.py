"""Record what every block of a backbone takes and returns during one forward."""
from contextlib import contextmanager


@contextmanager
def record_blocks(blocks):
    """Within the ``with``, every call of a block in ``blocks`` (a dict ``key ->
    Block``) records ``key -> (input tokens, hw_shape, output tokens)`` into the
    dict it yields (forward hooks, removed on exit). The blocks are called as
    ``block(x, hw_shape, state) -> (x, state)``."""
    records = {}

    def hook(key):
        def _record(module, args, output):
            records[key] = (args[0], tuple(args[1]), output[0])
        return _record

    handles = [block.register_forward_hook(hook(key)) for key, block in blocks.items()]
    try:
        yield records
    finally:
        for handle in handles:
            handle.remove()
