"""mmengine's optimizer wrapper constructor, with plain-dict parameter groups and
no weight decay where a module says so.

With a ``paramwise_cfg`` mmengine passes the optimizer its parameter groups inside
a ``ConfigDict``, so every group is a ``ConfigDict``; dynamo (torch 2.14) cannot
trace ``Optimizer.step`` over them (``'UserDefinedDictVariable' object has no
attribute 'items'``), and a config with ``compile=...`` fails at its first step
whatever the model. Our config bases name this constructor.

A module lists the parameters that take no weight decay in its
``no_weight_decay`` attribute (local names or prefixes: WKV's rates, Gated
DeltaNet's ``A_log``, position embeddings ...), as timm's models do; this
constructor keeps them out of weight decay whatever the config says, on top of
the config's own ``paramwise_cfg``.
"""
from mmengine.optim import DefaultOptimWrapperConstructor

from mmhybrid.registry import OPTIM_WRAPPER_CONSTRUCTORS


def no_weight_decay_names(model):
    """Full names of the parameters that a module of ``model`` declares in its
    ``no_weight_decay``."""
    names = []
    for prefix, module in model.named_modules():
        declared = getattr(module, 'no_weight_decay', ())
        for name, _ in module.named_parameters():
            if any(name == d or name.startswith(d + '.') for d in declared):
                names.append(f'{prefix}.{name}' if prefix else name)
    return names


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class PlainGroupsOptimWrapperConstructor(DefaultOptimWrapperConstructor):
    """:class:`DefaultOptimWrapperConstructor` whose optimizer holds plain dicts
    and whose parameter groups honour the modules' ``no_weight_decay``."""

    def __call__(self, model):
        names = no_weight_decay_names(getattr(model, 'module', model))
        if names:
            custom = dict(self.paramwise_cfg.get('custom_keys', {}))
            # mmengine applies the longest matching key: merge the one a name
            # would get, so its other settings (lr_mult ...) stay
            by_length = sorted(sorted(custom), key=len, reverse=True)
            for name in names:
                match = next((k for k in by_length if k in name), None)
                custom[name] = dict(custom.get(match, {}), decay_mult=0.)
            self.paramwise_cfg = dict(self.paramwise_cfg, custom_keys=custom)
        optim_wrapper = super().__call__(model)
        optimizer = optim_wrapper.optimizer
        optimizer.param_groups = [dict(group) for group in optimizer.param_groups]
        return optim_wrapper
