"""mmengine's optimizer wrapper constructor, with plain-dict parameter groups.

With a ``paramwise_cfg`` mmengine passes the optimizer its parameter groups inside
a ``ConfigDict``, so every group is a ``ConfigDict``; dynamo (torch 2.14) cannot
trace ``Optimizer.step`` over them (``'UserDefinedDictVariable' object has no
attribute 'items'``), and a config with ``compile=...`` fails at its first step
whatever the model. Our config bases name this constructor.
"""
from mmengine.optim import DefaultOptimWrapperConstructor

from mmhybrid.registry import OPTIM_WRAPPER_CONSTRUCTORS


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class PlainGroupsOptimWrapperConstructor(DefaultOptimWrapperConstructor):
    """:class:`DefaultOptimWrapperConstructor` whose optimizer holds plain dicts."""

    def __call__(self, model):
        optim_wrapper = super().__call__(model)
        optimizer = optim_wrapper.optimizer
        optimizer.param_groups = [dict(group) for group in optimizer.param_groups]
        return optim_wrapper
