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
    every, per_op = None, {}
    for item in filter(None, (part.strip().lower() for part in spec.split(','))):
        if '=' in item:
            op, name = (part.strip() for part in item.split('=', 1))
            per_op[op] = name
        else:
            every = item
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


def _requested(op, names):
    """(name, source) from use_backend or the environment, or (None, None)."""
    layers = list(reversed(_overrides))
    env = os.environ.get(ENV_VAR, '')
    if env.strip():
        layers.append(_parse(env))
    for i, (every, per_op) in enumerate(layers):
        source = 'use_backend' if i < len(_overrides) else ENV_VAR
        name = per_op.get(op)
        if name and name != 'auto':
            return name, f'{source} ({op}={name})'
        if every and every != 'auto' and every in names:
            return every, f'{source} ({every} for every op)'
    return None, None


def choose_backend(op, names, auto, backend=None):
    """The backend ``op`` runs: ``backend``, else :func:`use_backend`, else
    ``$MMHYBRID_BACKEND``, else ``auto()``.

    Args:
        op (str): the op function's name, the key of per-op overrides.
        names (Iterable[str]): the backends the op has.
        auto (callable): returns the automatic choice for the call's tensors.
        backend (str, optional): the call's ``backend=`` argument.
    Raises:
        UnknownBackendError: a name the op does not have, naming where it came
            from and the choices.
    """
    name = (backend or '').strip().lower()
    source = 'backend='
    if name in ('', 'auto'):
        name, source = _requested(op, names)
        if name is None:
            return auto()
    if name not in names:
        raise UnknownBackendError(f'unknown {op} backend {name!r} (from {source}); '
                                  f'use one of {sorted(names)} or auto')
    return name


def triton_if_usable(fused_module, *tensors):
    """``'triton'`` for CUDA tensors that the kernels of ``fused_module()`` accept
    (``triton_unusable_reason(*tensors) is None``), else ``'torch'``. The module
    is imported only for CUDA tensors; an ImportError means no Triton."""
    if not tensors[0].is_cuda:
        return 'torch'
    try:
        return 'torch' if fused_module().triton_unusable_reason(*tensors) else 'triton'
    except ImportError:
        return 'torch'
