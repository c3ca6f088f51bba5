"""Whether an op runs under a graph tracer.

The ops pick their fastest eager form from tensor values (WKV's range check) and
from sizes (chunk and block lengths, window regions). A traced graph must hold for
every size and value it will see, so under a tracer they take one form chosen from
nothing but the inputs' ranks and dtypes.
"""
import contextlib

import torch


def is_tracing():
    """True under ``torch.jit.trace`` (the TorchScript ONNX exporter),
    ``torch.compile`` and ``torch.export`` (the dynamo ONNX exporter)."""
    return torch.jit.is_tracing() or torch.compiler.is_compiling()


def no_autocast(device_type):
    """``torch.autocast(device_type, enabled=False)`` where autocast is on, else a
    no-op: torch.export cannot serialize an autocast region whose inputs hold
    symbolic sizes (``SymFloat graph input is not implemented``)."""
    if torch.is_autocast_enabled(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()
