r"""The chunk-to-chunk state recurrence ``M_{i+1} = A_i M_i + B_i``.

It is the one sequential step of the chunk form (:mod:`.chunk`): one small matmul
per chunk. Eager runs it as a Python loop. A traced graph must keep it as a loop
that holds for every chunk count, and each tracer has its own:

- ``torch.jit.trace`` (the TorchScript ONNX exporter): the loop scripted, an ONNX
  ``Loop``;
- ``torch.export`` (the dynamo ONNX exporter): the ``scan`` higher-order op, an
  ONNX ``Scan``;
- ``torch.compile``: the custom op ``mmhybrid::affine_recurrence`` (the eager loop
  at run time, a fake kernel for shapes, autograd registered). Inductor lowers
  ``scan`` to a ``while_loop`` whose body reads its counter with ``.item()``, which
  only a whole-graph capture allows (torch 2.14): ``torch.compile(model)`` without
  ``fullgraph=True``, the default and mmengine's ``compile=True``, fails on it.

The backward of the recurrence is the same recurrence run in reverse on the
transposed steps: ``G_i = A_i^T G_{i+1} + dS_i`` with ``G_n = dM_n``; then
``dA_i = G_{i+1} M_i^T``, ``dB_i = G_{i+1}`` and ``dM_0 = G_0``.
"""
import functools

import torch
from torch._higher_order_ops import scan


def state_recurrence(trans, bias, state):
    """``M_{i+1} = trans_i M_i + bias_i`` over the chunks: the states entering
    each chunk, stacked, and the one leaving the last."""
    states = []
    for i in range(trans.shape[0]):
        states.append(state)
        state = torch.baddbmm(bias[i], trans[i], state)
    return torch.stack(states), state


@torch.library.custom_op('mmhybrid::affine_recurrence', mutates_args=())
def affine_recurrence(trans: torch.Tensor, bias: torch.Tensor,
                      state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`state_recurrence` as one op that compilers do not look into."""
    states, last = state_recurrence(trans, bias, state)
    return states, last.clone() if last is state else last  # outputs own memory


@affine_recurrence.register_fake
def _(trans, bias, state):
    return torch.empty_like(bias), torch.empty_like(state)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], output[0])


def _backward(ctx, dstates, dlast):
    trans, states = ctx.saved_tensors
    # G_{i+1} for every step i, and G_0 = dM_0: the reverse recurrence
    adjoints, dstate = affine_recurrence(trans.transpose(-1, -2).flip(0),
                                         dstates.flip(0), dlast)
    adjoints = adjoints.flip(0)
    return adjoints @ states.transpose(-1, -2), adjoints, dstate


affine_recurrence.register_autograd(_backward, setup_context=_setup_context)


def _scan_step(state, x):
    return torch.baddbmm(x[1], x[0], state), state.clone()  # no aliased output


@functools.cache
def _scripted_recurrence():
    return torch.jit.script(state_recurrence)


def recurrence(trans, bias, state):
    """:func:`state_recurrence` in the form the current tracer keeps as a loop
    (module docstring): (states entering each chunk, the state leaving the last)."""
    if torch.jit.is_tracing():
        return _scripted_recurrence()(trans, bias, state)
    if torch.compiler.is_exporting():
        state, states = scan(_scan_step, state, (trans, bias))
        return states, state
    if torch.compiler.is_compiling():
        return affine_recurrence(trans, bias, state)
    return state_recurrence(trans, bias, state)
