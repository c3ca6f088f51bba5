"""How every op picks its backend: ``backend=``, else an environment variable,
else a choice made from the tensors (device type, dtype, what is installed).

:func:`choose_backend` is the rule; :class:`BackendRegistry` keeps the named
implementations of one op and a default per device type for ops that let other
kernels register themselves.
"""
import os


class UnknownBackendError(KeyError, ValueError):
    """A backend name the op does not have (both a KeyError and a ValueError)."""

    def __str__(self):
        return str(self.args[0])


def choose_backend(op, names, auto, backend=None, env_var=None):
    """The backend name: ``backend``, else ``$env_var``, else ``auto()``.

    ``None``, ``''`` and ``'auto'`` defer to the next source. A name outside
    ``names`` raises :class:`UnknownBackendError` naming the op, where the name
    came from and the choices.
    """
    name = backend or (os.environ.get(env_var, '') if env_var else '')
    name = name.strip().lower()
    if name in ('', 'auto'):
        return auto()
    if name not in names:
        source = f'backend= or {env_var}' if env_var else 'backend='
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


class BackendRegistry:
    """Named implementations of one op, a default per device type, and an
    environment variable that overrides the default for every call."""

    def __init__(self, op, backends, env_var=None, fallback='chunk'):
        self.op = op
        self.backends = dict(backends)
        self.env_var = env_var
        self.fallback = fallback
        self.defaults = {}

    def register(self, name, fn, default_for=()):
        """Add backend ``fn`` as ``name``; make it the default for these device types."""
        self.backends[name] = fn
        for device_type in default_for:
            self.defaults[device_type] = name

    def names(self):
        return sorted(self.backends)

    def lookup(self, device_type, backend=None):
        """The implementation to run for tensors on ``device_type``."""
        name = choose_backend(self.op, self.backends,
                              lambda: self.defaults.get(device_type, self.fallback),
                              backend, self.env_var)
        return self.backends[name]
