"""Build a registered token mixer for one layer of a backbone."""
import inspect

from mmhybrid.registry import MIXERS
from ..mixer_layout import describe_mixers, mixer_letters, registered_mixers

_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def mixer_options(cls):
    """The keyword arguments ``cls(...)`` takes, through ``**kwargs`` into its
    bases' constructors."""
    names = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get('__init__')
        if init is None:
            continue
        params = inspect.signature(init).parameters.values()
        names |= {p.name for p in params if p.kind in _NAMED} - {'self'}
        if all(p.kind != inspect.Parameter.VAR_KEYWORD for p in params):
            break
    return names


def check_mixer_cfg(mixer_cfg, owner):
    """``mixer_cfg``, the user's options per mixer keyed by name or letter ->
    ``{name: options}``, each option one its mixer takes."""
    names, letters = registered_mixers(), mixer_letters()
    checked = {}
    for key, options in (mixer_cfg or {}).items():
        name = letters.get(key, key)
        if name not in names:
            raise KeyError(f'{owner}: mixer_cfg names unknown mixer {key!r}; '
                           f'registered mixers: {describe_mixers()}')
        unknown = set(options) - mixer_options(names[name])
        if unknown:
            raise ValueError(
                f'{owner}: mixer_cfg[{key!r}] has {sorted(unknown)}, which '
                f'{names[name].__name__} does not take; it takes '
                f'{sorted(mixer_options(names[name]) - {"dims", "num_heads"})}')
        checked[name] = dict(options)
    return checked


def build_mixer(name, dims, num_heads, context=(), options=()):
    """The registered mixer ``name`` for a layer of ``dims`` channels.

    Args:
        name (str): a registered name (:data:`mmhybrid.registry.MIXERS`).
        dims (int): channels. num_heads (int): heads the backbone gives the layer.
        context (dict): what the backbone offers every layer (its window size,
            ``qkv_bias``, ``history``, the layer's ``depth`` ...): the mixer
            receives those its constructor names, and its defaults stand for
            the others (docs/contributing.md lists them).
        options (dict): the user's options for this mixer (``mixer_cfg[name]``),
            over the context.
    """
    cls = MIXERS.get(name)
    accepted = mixer_options(cls)
    kwargs = {k: v for k, v in dict(context).items() if k in accepted}
    kwargs.update(options)
    return cls(dims=dims, num_heads=num_heads, **kwargs)
