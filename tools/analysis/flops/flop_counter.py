"""Count the multiply-adds of a forward pass, per module and per kind of work.

fvcore's convention (that of mmengine's ``FlopAnalyzer`` and upstream ``get_flops``
tools): a fused multiply-add counts 1; matrix products and convolutions count
their multiply-adds; norms, interpolation and pooling fvcore's per-element
factors; element-wise ops nothing. Added: ``F.scaled_dot_product_attention`` as
one op on any backend (``Q K^T`` and ``A V``; fvcore cannot see it, torch's
counter counts 0 for the CPU kernel), and modules with a ``macs`` method, whose
count replaces the ops they run outside their children: scans and fused kernels
do not show their arithmetic (docs/contributing.md). ``macs`` takes the
arguments of the module's ``forward`` (defaults included) and returns the
multiply-adds as an int, or ``{kind: count}`` to keep kinds apart in reports.
:class:`FlopCounter` runs the model for real (a ``TorchDispatchMode`` plus module
hooks).
"""
import inspect
import math
from collections import Counter, defaultdict

import torch
import torch.nn.functional as F
from mmengine.analysis.jit_handles import conv_flop_count
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
def _product(a, *_, out):
    """Matrix products (mm, mv, dot, bmm): ``a``'s last dim per output element."""
    return out.numel() * a.shape[-1]


def _add_product(bias, a, *_, out):
    return _product(a, out=out)


def _conv(x, weight, bias, stride, padding, dilation, transposed, *_, out):
    return conv_flop_count(x.shape, weight.shape, out.shape, transposed)


def _attention(q, k, v, *_):
    """Scaled-dot-product attention on (..., L, E) queries, (..., S, E) keys."""
    *batch, L, E = q.shape
    return math.prod(batch) * L * k.shape[-2] * (E + v.shape[-1])


def _norm(x, weight, training=True):
    return x.numel() * ((5 if weight is not None else 4) if training else
                        (2 if weight is not None else 1))


# aten op -> (kind, count(*args, out=output)); fvcore's factors where it has them
ATEN_RULES = {
    **dict.fromkeys([aten.mm, aten.mv, aten.dot, aten.bmm], ('matmul', _product)),
    **dict.fromkeys([aten.addmm, aten._addmm_activation, aten.addmv, aten.baddbmm],
                    ('matmul', _add_product)),
    **dict.fromkeys([aten.convolution, aten._convolution], ('conv', _conv)),
    aten.native_layer_norm: ('norm', lambda x, shape, weight, *_, out: _norm(x, weight)),
    aten.native_group_norm: ('norm', lambda x, weight, *_, out: _norm(x, weight)),
    aten._native_batch_norm_legit_no_training: (
        'norm', lambda x, weight, *_, out: _norm(x, weight, False)),
    aten._native_batch_norm_legit: ('norm', lambda x, weight, *_, out: _norm(x, weight)),
    aten.native_batch_norm: (
        'norm', lambda x, weight, b, rm, rv, training, *_, out: _norm(x, weight, training)),
    aten.upsample_nearest2d: ('resample', lambda *a, out: out.numel()),
    aten._upsample_nearest_exact2d: ('resample', lambda *a, out: out.numel()),
    aten.upsample_bilinear2d: ('resample', lambda *a, out: 4 * out.numel()),
    aten._adaptive_avg_pool2d: ('resample', lambda x, *_, out: x.numel()),
    aten.grid_sampler_2d: ('resample', lambda *a, out: 4 * out.numel()),
}


class FlopCount:
    """``counts[module_name][kind]``: multiply-adds by innermost module ('': root)."""

    def __init__(self, counts):
        self.counts = counts

    def by_kind(self, prefix=''):
        """Counter of kind -> multiply-adds inside module ``prefix``."""
        total = Counter()
        for name, kinds in self.counts.items():
            if not prefix or name == prefix or name.startswith(prefix + '.'):
                total.update(kinds)
        return total

    def total(self, prefix=''):
        return sum(self.by_kind(prefix).values())


class _AttentionCalls(TorchFunctionMode):
    """Counts ``F.scaled_dot_product_attention`` as one op, whatever kernel runs
    (the math fallback would otherwise show up as two matmuls)."""

    def __init__(self, counter):
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not F.scaled_dot_product_attention:
            return func(*args, **kwargs)
        self.counter._add('attention', _attention(*args[:3]))
        self.counter._muted += 1
        try:
            return func(*args, **kwargs)
        finally:
            self.counter._muted -= 1


class FlopCounter(TorchDispatchMode):
    """Context manager that counts the multiply-adds ``model`` runs inside it
    (``counter.result``: a :class:`FlopCount`)."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.counts = defaultdict(Counter)
        self._stack = []  # [name, formula, inputs] of the modules running
        self._handles = []
        self._muted = 0  # > 0 inside an op counted as a whole
        self._attention = _AttentionCalls(self)

    @property
    def result(self):
        return FlopCount({k: Counter(v) for k, v in self.counts.items()})

    def __enter__(self):
        for name, module in self.model.named_modules():
            self._handles += [
                module.register_forward_pre_hook(self._enter_module(name),
                                                 with_kwargs=True),
                module.register_forward_hook(self._leave_module, always_call=True)]
        self._attention.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        while self._handles:
            self._handles.pop().remove()
        self._attention.__exit__(*exc)
        return super().__exit__(*exc)

    def _add(self, kind, count):
        """Count ``kind`` for the innermost running module unless its formula or an
        enclosing whole-op count covers it."""
        if self._muted or (self._stack and self._stack[-1][1] is not None):
            return
        self.counts[self._stack[-1][0] if self._stack else ''][kind] += int(count)

    def _enter_module(self, name):
        def hook(module, args, kwargs):
            formula = getattr(module, 'macs', None)
            if formula is not None:  # forward's arguments in order, as macs takes
                bound = inspect.signature(module.forward).bind(*args, **kwargs)
                bound.apply_defaults()
                args = bound.args
            self._stack.append((name, formula, args))
        return hook

    def _leave_module(self, module, inputs, output):
        name, formula, inputs = self._stack.pop()
        if formula is not None:
            count = formula(*inputs)
            self.counts[name].update(
                count if isinstance(count, dict) else {type(module).__name__: count})

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket in ATEN_RULES:
            kind, count = ATEN_RULES[func.overloadpacket]
            self._add(kind, count(*args, out=out))
        return out


def count_flops(model, *inputs, **kwargs):
    """Run ``model(*inputs, **kwargs)`` without gradients; return its FlopCount."""
    with FlopCounter(model) as counter, torch.no_grad():
        model(*inputs, **kwargs)
    return counter.result
