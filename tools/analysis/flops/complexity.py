"""Parameters and multiply-adds of a model, per stage of its backbone and per part."""
import itertools
from collections import Counter

import torch.nn as nn

from .flop_counter import count_flops


def stage_parts(backbone):
    """``[(label, [modules and parameters])]`` of a backbone.

    mmhybrid backbones list their stages through ``stage_parts(i)`` (0 = stem, as
    ``frozen_stages`` uses them); any other module is split into its children.
    """
    rows = []
    for index in itertools.count() if hasattr(backbone, 'stage_parts') else ():
        try:
            rows.append(('stem' if index == 0 else f'stage{index}',
                         backbone.stage_parts(index)))
        except (IndexError, NotImplementedError):
            break
    return rows or [(name, [child]) for name, child in backbone.named_children()]


class Complexity:
    """Parameters and multiply-adds of ``model(*inputs, **kwargs)``, by module."""

    def __init__(self, model, *inputs, **kwargs):
        self.model = model
        self.flops = count_flops(model, *inputs, **kwargs)
        self._names = {id(m): name for name, m in model.named_modules()}

    def params(self, part=None):
        """Parameters of the whole model, of a module, or of a list of modules and
        parameters (each tensor once)."""
        parts = [self.model] if part is None else (
            part if isinstance(part, (list, tuple)) else [part])
        seen = {id(t): t.numel() for p in parts
                for t in ([p] if isinstance(p, nn.Parameter) else p.parameters())}
        return sum(seen.values())

    def kinds(self, part=None):
        """Counter kind -> multiply-adds of the model or of a module / module list."""
        if part is None:
            return self.flops.by_kind()
        parts = part if isinstance(part, (list, tuple)) else [part]
        total = Counter()
        for p in parts:
            if isinstance(p, nn.Module):
                total.update(self.flops.by_kind(self._names[id(p)]))
        return total

    def rows(self, module):
        """``[(label, params, kinds)]`` for each stage of ``module`` (a backbone) or
        each of its children, then a row for whatever the split leaves out."""
        rows = [(label, self.params(parts), self.kinds(parts))
                for label, parts in stage_parts(module)]
        rest_params = self.params(module) - sum(r[1] for r in rows)
        rest = self.kinds(module)
        rest.subtract(sum((r[2] for r in rows), Counter()))
        rest = Counter({k: v for k, v in rest.items() if v})
        if rest_params or rest:
            rows.append(('other', rest_params, rest))
        return rows
