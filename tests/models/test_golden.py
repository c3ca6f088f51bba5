"""Golden outputs: every arch of every backbone computes what it computed when the
goldens were recorded (before the consolidation of issue 15), with the same
state-dict keys and shapes.

Parameters are not drawn by the module constructors (whose order of random
draws may change with the code) but set from a generator seeded by each
state-dict key, so a golden pins the function of the architecture, not the
initialisation. Each case runs a float64 forward on an odd-sized input and one
backward of a fixed random projection of the outputs; the golden holds, per
output and per gradient, dot products with fixed random vectors (a sketch: any
change of a value changes them), not the tensors themselves.

Record (only when a change of the function is intended, and say so in the
commit), from the repository root: ``python -m tests.models.test_golden``.
"""
import gzip
import json
import os
import sys
import zlib

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

GOLDEN = os.path.join(os.path.dirname(__file__), 'golden', 'backbones.json.gz')
INPUT_HW = (61, 45)
SKETCH = 8  # random directions per tensor

# name -> (backbone config, runs in the default suite: between them, every
# mixer, MLP, merge, stem and state channel; the rest are marked slow)
CASES = {}


def _case(name, cfg, default=False):
    CASES[name] = (cfg, default)


for _arch in ('t', 's', 'b', 't-gdn', 'b-gdn'):
    _case(f'sola-{_arch}', dict(type='SoLAVision', arch=_arch))
_case('sola-t-nohsb', dict(type='SoLAVision', arch='t', with_hsb=False))
_case('sola-t-havit', dict(type='SoLAVision', arch='t', history=dict(alpha=0.45)),
      True)
_case('sola-t-ls-keynorm', dict(type='SoLAVision', arch='t', key_norm=True,
                                layer_scale_init_value=0.1, out_indices=(1, 3)))
_case('sola-t-gdn-w', dict(type='SoLAVision', arch='t-gdn',
                           schedule='WG/GG/GGSWGS/WS', window_size=(3, 5, 3, 3),
                           mixer_cfg=dict(G=dict(expand_v=2))), True)
for _arch in ('t', 'b'):
    _case(f'infinitevl-{_arch}', dict(type='InfiniteVLVision', arch=_arch))
for _family in ('SwinELFATT', 'CSWin'):
    for _arch in ('t', 'b'):
        for _attn in ('elfatt', 'local', 'global', 'effatt'):
            _case(f'{_family.lower()}-{_arch}-{_attn}',
                  dict(type=_family, arch=_arch, attn=_attn),
                  _arch == 't' and _family == 'SwinELFATT' and _attn == 'local')
_case('swinelfatt-t-1d-havit', dict(type='SwinELFATT', arch='t', attn='E,E,GE,G',
                                    block_layout='1d', history=dict(alpha=0.45)),
      True)
_case('cswin-t-abspos-ratio', dict(type='CSWin', arch='t', attn='E,F,GL,G',
                                   global_ratio=0.25, use_abs_pos_embed=True,
                                   out_indices=(0, 2)), True)
for _arch in ('linear-4l', 'pure-4l', 'linear-24l', 'pure-24l', 'linear-b',
              'pure-b'):
    _case(f'infvit-{_arch}', dict(type='InfViT', arch=_arch))
_case('infvit-mixed', dict(type='InfViT', arch='linear-4l', attn_types='PLSS',
                           local_path='lepe', discount='depth',
                           history=dict(alpha=0.45), out_indices=(0, 1, 2, 3)),
      True)
for _arch in ('paper', 'deit-t', 'deit-s', 'deit-b'):
    _case(f'havit-{_arch}', dict(type='HAViT', arch=_arch, out_type='featmap'),
          _arch == 'deit-t')
_case('havit-deit-t-cls', dict(type='HAViT', arch='deit-t', history=None))


def _generator(key):
    return torch.Generator().manual_seed(zlib.crc32(key.encode()))


def _set_parameters(model):
    """Every state-dict tensor from a generator seeded by its key."""
    state = model.state_dict()
    for key, value in state.items():
        if not value.is_floating_point():
            continue
        draw = torch.randn(value.shape, generator=_generator(key),
                           dtype=torch.float64)
        if value.dim() <= 1 and ('norm' in key or key.endswith('gamma')
                                 or 'ln' in key):
            draw = 1 + 0.1 * draw  # norm / layer-scale weights near one
        else:
            draw = draw * (0.5 / max(value[0].numel(), 1)**0.5 if value.dim() > 1
                           else 0.1)
        value.copy_(draw.to(value.dtype))


def _sketch(tensor, key):
    """Dot products of ``tensor`` with SKETCH fixed random directions, and its sum."""
    flat = tensor.detach().double().flatten()
    directions = torch.randn(SKETCH, flat.numel(), generator=_generator(key),
                             dtype=torch.float64)
    return (directions @ flat).tolist() + [flat.sum().item()]


def run_case(name):
    """(keys and shapes, sketches) of backbone ``name`` in float64."""
    from mmhybrid.registry import build_model
    cfg, _ = CASES[name]
    torch.manual_seed(0)
    model = build_model(dict(cfg, drop_path_rate=0.))
    keys = [[k, list(v.shape)] for k, v in sorted(model.state_dict().items())]
    model = model.double()
    _set_parameters(model)
    model.eval()
    x = torch.randn(1, 3, *INPUT_HW, generator=_generator(name),
                    dtype=torch.float64, requires_grad=True)
    outs = model(x)
    sketches = {f'out{i}': _sketch(o, f'{name}/out{i}') for i, o in enumerate(outs)}
    loss = sum((o * torch.randn(o.shape, generator=_generator(f'{name}/w{i}'),
                                dtype=o.dtype)).sum() for i, o in enumerate(outs))
    loss.backward()
    sketches['grad_input'] = _sketch(x.grad, f'{name}/grad_input')
    for key, param in sorted(model.named_parameters()):
        if param.grad is not None:
            sketches[f'grad/{key}'] = _sketch(param.grad, f'{name}/grad/{key}')[:2]
    return keys, sketches


class RoundingDown(TorchDispatchMode):
    """Records the ops that take a float64 tensor and return a floating tensor
    of lower precision: a golden pins the float64 function only if there is
    none (float32 rounding differs from host to host, e.g. AMD vs Intel)."""

    def __init__(self):
        super().__init__()
        self.found = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if any(isinstance(t, torch.Tensor) and t.dtype == torch.float64
               for t in tree_flatten((args, kwargs))[0]) and any(
                   isinstance(t, torch.Tensor) and t.is_floating_point()
                   and t.dtype.itemsize < 8 for t in tree_flatten(out)[0]):
            self.found.add(str(func))
        return out


def _load():
    with gzip.open(GOLDEN, 'rt') as f:
        return json.load(f)


def _params(default_only):
    return [pytest.param(n, marks=() if d else pytest.mark.slow)
            for n, (_, d) in CASES.items() if d or not default_only]


@pytest.mark.parametrize('name', _params(default_only=False))
def test_golden(name):
    golden = _load()[name]
    with RoundingDown() as rounding:
        keys, sketches = run_case(name)
    assert not rounding.found, f'float64 rounded down by {sorted(rounding.found)}'
    assert keys == golden['keys'], 'state-dict keys or shapes changed'
    assert sorted(sketches) == sorted(golden['sketches'])
    for key, values in sketches.items():
        expected = torch.tensor(golden['sketches'][key], dtype=torch.float64)
        actual = torch.tensor(values, dtype=torch.float64)
        scale = expected.abs().max().clamp_min(1e-30)
        assert torch.allclose(actual, expected, rtol=1e-10, atol=1e-10 * scale), (
            f'{name} {key}: {actual.tolist()} != {expected.tolist()}')


def record(names):
    goldens = _load() if os.path.exists(GOLDEN) else {}
    for name in names:
        keys, sketches = run_case(name)
        goldens[name] = dict(keys=keys, sketches=sketches)
        print(f'{name}: {len(keys)} tensors, {len(sketches)} sketches', flush=True)
    os.makedirs(os.path.dirname(GOLDEN), exist_ok=True)
    with gzip.open(GOLDEN, 'wt') as f:
        json.dump(goldens, f, sort_keys=True)


if __name__ == '__main__':
    torch.set_num_threads(1)
    record(sys.argv[1:] or list(CASES))
