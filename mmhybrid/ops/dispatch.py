"""How every op picks its backend: one rule for all of them.

An op function (``bi_wkv``, ``effatt``, ``softmax_attention``, ...) takes
``backend=``; the first of these that names a backend wins:

1. the ``backend=`` argument;
2. :func:`use_backend`, a context manager (innermost wins);
3. the environment variable ``MMHYBRID_BACKEND``;
4. the op's automatic choice from the tensors (device, dtype, what is installed).

Every op has ``'torch'``, its portable PyTorch path (exact, any device), and some
have faster ones (``'triton'``, ``'flash'``, ``'fla'``) or a ``'naive'`` reference.
An override is either one name for every op (``MMHYBRID_BACKEND=torch``,
``use_backend('torch')``) or names per op, keyed by the op function's name
(``MMHYBRID_BACKEND=bi_wkv=torch,effatt=triton``, ``use_backend(bi_wkv='torch')``).
One name for every op applies to the ops that have it and leaves the others on
their next rule (``triton`` does not touch ``softmax_attention``); a per-op name the
op lacks is an error. ``None``, ``''`` and ``'auto'`` defer to the next rule. A
forced backend that cannot run on the tensors raises instead of falling back.
"""
import contextlib
import importlib
import os
import re
import warnings

ENV_VAR = 'MMHYBRID_BACKEND'
_overrides = []  # stack of (name for every op or None, {op: name}) from use_backend

_retired = sorted(v for v in os.environ if re.fullmatch(r'MMHYBRID_\w+_BACKEND', v))
if _retired:
    warnings.warn(f'{", ".join(_retired)} no longer select backends; use {ENV_VAR} '
                  f'(e.g. {ENV_VAR}=bi_wkv=torch,effatt=triton)')


class UnknownBackendError(KeyError, ValueError):
    """A backend name the op does not have (both a KeyError and a ValueError)."""

    def __str__(self):
        return str(self.args[0])


def _parse(spec):
    """``'torch'`` -> ('torch', {}); ``'bi_wkv=torch, effatt=triton'`` -> (None, {...})."""
    items = [part.strip().lower() for part in spec.split(',') if part.strip()]
    per_op = dict(map(str.strip, item.split('=', 1)) for item in items if '=' in item)
    every = next((item for item in reversed(items) if '=' not in item), None)
    return every, per_op


@contextlib.contextmanager
def use_backend(every=None, **per_op):
    """Inside the block, ops use backend ``every`` (where they have it) and the
    per-op names given as keywords (``use_backend(bi_wkv='torch')``), unless a call
    passes ``backend=``. Nested blocks: the inner one wins, op by op."""
    _overrides.append((every.lower() if every else None,
                       {op: name.lower() for op, name in per_op.items() if name}))
    try:
        yield
    finally:
        _overrides.pop()


def choose_backend(op, names, auto, backend=None):
    """The backend ``op`` (the op function's name, the key of per-op overrides)
    runs, one of ``names``: ``backend``, else :func:`use_backend`, else
    ``$MMHYBRID_BACKEND``, else ``auto()``. A name the op lacks raises
    :class:`UnknownBackendError` naming where it came from and the choices."""
    name, source = (backend or '').strip().lower(), 'backend='
    if name in ('', 'auto'):
        layers = [(o, 'use_backend') for o in reversed(_overrides)]
        if os.environ.get(ENV_VAR, '').strip():
            layers.append((_parse(os.environ[ENV_VAR]), ENV_VAR))
        for (every, per_op), where in layers:
            if per_op.get(op) not in (None, '', 'auto'):
                name, source = per_op[op], f'{where} ({op}={per_op[op]})'
                break
            if every in names:
                name, source = every, f'{where} ({every} for every op)'
                break
        else:
            return auto()
    if name not in names:
        raise UnknownBackendError(f'unknown {op} backend {name!r} (from {source}); '
                                  f'use one of {sorted(names)} or auto')
    return name


def triton_or_torch(op, package, tensors, backend=None):
    """The backend of an op with ``'torch'`` and ``'triton'`` (its kernels in
    ``<package>.fused``); automatic: ``'triton'`` for CUDA tensors the kernels
    accept (``triton_unusable_reason(*tensors) is None``) when Triton imports."""
    def auto():
        try:
            usable = tensors[0].is_cuda and not fused_module(
                package, op).triton_unusable_reason(*tensors)
        except RuntimeError:  # no Triton
            usable = False
        return 'triton' if usable else 'torch'

    return choose_backend(op, ('torch', 'triton'), auto, backend)


def fused_module(package, op):
    """``<package>.fused``, imported on first use (Triton is optional and slow to
    import); RuntimeError naming ``op`` where Triton does not import."""
    try:
        return importlib.import_module('.fused', package)
    except ImportError as err:
        raise RuntimeError(f'{op} triton backend: triton does not import '
                           f'({err})') from err
