"""Weight inheritance from a softmax Transformer (InfiniteVL Sec. 3.3): a layer of
another kind starts from the teacher layer's tensors.

The teacher's attention and MLP come in one neutral form (:class:`SoftmaxWeights`,
:class:`MlpWeights`). Each mixer's ``inherit_softmax(attn)`` and each MLP's
``inherit_mlp(mlp)`` (the rule lives with the class) returns an
:class:`Inherited`: its own tensors and an account of what was copied, what is
new and why, and what of the teacher's was dropped. The backbone-level pairing
is :func:`mmhybrid.models.utils.inherit.inherit_from_softmax`.
"""
from dataclasses import dataclass, field
from typing import NamedTuple, Optional

import torch


class Linear(NamedTuple):
    """A linear layer's ``weight`` (out, in) and ``bias`` (None: it has none)."""
    weight: torch.Tensor
    bias: Optional[torch.Tensor] = None


class SoftmaxWeights(NamedTuple):
    """A softmax attention layer: the q, k, v and output projections, Swin's
    relative-position-bias table ((2W-1)^2, heads) or None, and its heads (None
    where the checkpoint does not tell: a ViT's heads are not in its tensors)."""
    q: Linear
    k: Linear
    v: Linear
    proj: Linear
    bias_table: Optional[torch.Tensor] = None
    num_heads: Optional[int] = None

    @classmethod
    def from_fused(cls, qkv, proj, bias_table=None):
        """From a fused ``qkv`` :class:`Linear` (q | k | v rows)."""
        biases = (None, ) * 3 if qkv.bias is None else qkv.bias.chunk(3)
        q, k, v = (Linear(w, b) for w, b in zip(qkv.weight.chunk(3), biases))
        heads = None if bias_table is None else bias_table.shape[1]
        return cls(q, k, v, proj, bias_table, heads)

    @property
    def qkv(self):
        """The fused projection, q | k | v rows."""
        bias = (None if self.q.bias is None else
                torch.cat([self.q.bias, self.k.bias, self.v.bias]))
        return Linear(torch.cat([self.q.weight, self.k.weight, self.v.weight]), bias)


class MlpWeights(NamedTuple):
    """A Transformer MLP ``fc2(act(fc1(x)))``."""
    fc1: Linear
    fc2: Linear


@dataclass
class Inherited:
    """What a rule returns.

    Attributes:
        tensors (dict): this module's tensors it sets (state-dict names relative
            to the module): copied or derived from the teacher, or initialised
            here (then named in ``new``).
        copied (str): how the teacher's tensors map, e.g. ``'receptance<-q,
            key<-k'``.
        new (dict): own tensors or submodules that do not come from the teacher
            -> how they start (set in ``tensors``, or kept at their init).
        dropped (dict): the teacher's tensors with no place here (their names
            in the neutral form: ``q.bias``, ``qkv.bias``, ``bias_table``,
            ``fc1.bias`` ..., several joined by ``', '``) -> why.
        note (str): what else changes (an activation, a resize).
    """
    tensors: dict
    copied: str
    new: dict = field(default_factory=dict)
    dropped: dict = field(default_factory=dict)
    note: str = ''

    @property
    def exact(self):
        """Every tensor copied as it is, nothing new or dropped."""
        return not (self.new or self.dropped or self.note)

    def describe(self):
        parts = [self.copied]
        parts += [f'new {k} {v}' for k, v in self.new.items()]
        parts += [f'dropped {k} ({v})' for k, v in self.dropped.items()]
        return '; '.join(parts + ([self.note] if self.note else []))


def take(param, value, what):
    """``value`` as the new value of ``param``, the shapes checked."""
    if value.shape != param.shape:
        raise ValueError(f"{what}: the teacher's is {tuple(value.shape)}, this "
                         f"layer's {tuple(param.shape)}")
    return value.detach().to(param.dtype).clone()


def copy_linear(result, name, module, teacher, what=None):
    """Teacher :class:`Linear` into ``module`` (an ``nn.Linear`` at ``name``):
    a teacher bias without a place is dropped, a bias the teacher lacks starts
    at zero (the same function)."""
    what = what or name
    result.tensors[f'{name}.weight'] = take(module.weight, teacher.weight, what)
    if module.bias is not None and teacher.bias is not None:
        result.tensors[f'{name}.bias'] = take(module.bias, teacher.bias, what)
    elif module.bias is not None:
        result.tensors[f'{name}.bias'] = torch.zeros_like(module.bias)
        result.new[f'{name}.bias'] = 'zero (the teacher has none)'
    elif teacher.bias is not None:
        result.dropped[f'{what}.bias'] = f'{name} has none'


def identity_dwconv(conv):
    """A depth-wise conv's tensors that pass its input through: centre tap 1."""
    weight = torch.zeros_like(conv.weight)
    weight[:, :, conv.weight.shape[2] // 2, conv.weight.shape[3] // 2] = 1
    out = {'weight': weight}
    if conv.bias is not None:
        out['bias'] = torch.zeros_like(conv.bias)
    return out


def zero_module(module):
    """Zeros for every tensor of ``module`` (a residual branch that adds nothing)."""
    return {k: torch.zeros_like(v) for k, v in module.state_dict().items()}


def start_lepe_at_zero(result, lepe, attn):
    """The account of an attention's optional LePE ``lepe`` (a new branch that
    starts at zero, adding nothing) and of a teacher bias table it has no place
    for."""
    if lepe is not None:
        result.tensors.update({f'lepe.{k}': v for k, v in zero_module(lepe).items()})
        result.new['lepe'] = 'zero (the branch adds nothing)'
    if attn.bias_table is not None:
        result.dropped['bias_table'] = 'no position bias here'
    return result
