r"""Linear InfSA (Sec. 3.4, Eq. 16-21) in PyTorch: O(N d) time, an O(d) state per head.

Per (batch, head), with :math:`e_i = \|Q_i\|` (Eq. 16) and :math:`E = \sum_i e_i`:

.. math::
    \bar q = \frac{\sum_i e_i Q_i}{E + \epsilon}\ \text{(Eq. 17-18)},\quad
    s_j = [\bar q^T K_j]_+\ \text{(Eq. 19)},\quad
    h = \frac{\sum_j s_j V_j}{S + \epsilon},\ S = \sum_j s_j\ \text{(Eq. 20-21)}.

The hand-written backward (``G = dL/dh``) needs only the inputs and O(N) vectors:

* :math:`dV_j = s_j G / (S + \epsilon)`,
  :math:`dz_j = [s_j > 0] (V_j - h)^T G / (S + \epsilon)`,
* :math:`dK_j = dz_j \bar q`, :math:`d\bar q = \sum_j dz_j K_j`,
  :math:`dm = d\bar q / (E + \epsilon)`, :math:`dE = -d\bar q^T \bar q / (E + \epsilon)`,
* :math:`dQ_i = e_i\, dm + (Q_i^T dm + dE)\, Q_i / e_i` (0 where :math:`e_i = 0`);
  with tied ``Q = K`` the key term is added to the same buffer.

No N x d temporary is made for float32/float64 inputs (``torch.matmul`` would copy
head views of a (B, N, C) projection; :func:`head_matmul` does not), and autograd keeps
no copy of the inputs. Half-precision inputs are reduced in float32 one batch
element at a time. :mod:`.fused` is the Triton version of the same passes.

A traced graph (ONNX export, torch.compile, torch.export) must serve every batch
size: there the per-batch-element loops become single broadcast ops.
"""
import torch
from torch.autograd.function import once_differentiable

from ..heads import acc_dtype, head_matmul
from ..tracing import is_tracing, no_autocast


def _weighted_sum(weights, x):
    """(B, H, N) weights, (B, H, N, d) tokens -> (B, H, d) in the weights' dtype."""
    return head_matmul(weights[..., None, :], x, weights.dtype).squeeze(-2)


def _project(x, vec):
    """(B, H, N, d) tokens, (B, H, d) vector -> (B, H, N) dot products."""
    return head_matmul(x, vec[..., None], vec.dtype).squeeze(-1)


def _scores(q, keys, eps):
    """Energies ``e`` (Eq. 16), ``E + eps``, the central query (Eq. 17-18) and the
    scores ``s`` (Eq. 19), in at least float32 (fp64 stays fp64)."""
    acc = acc_dtype(q)
    if is_tracing():
        energy = torch.linalg.vector_norm(q, dim=-1, dtype=acc)
    else:  # one batch element at a time: no float32 copy of a half q
        energy = torch.stack([torch.linalg.vector_norm(x, dim=-1, dtype=acc)
                              for x in q.unbind(0)])
    energy_norm = energy.sum(-1, keepdim=True) + eps
    central = _weighted_sum(energy, q) / energy_norm
    return energy, energy_norm, central, torch.relu(_project(keys, central))


def _context(q, k, v, eps):
    """The context (B, H, 1, dv) in the dtype of ``v`` and what the backward keeps."""
    # autocast would run the float32 reductions in half precision
    with no_autocast(q.device.type):
        energy, energy_norm, central, scores = _scores(q, q if k is None else k, eps)
        score_norm = scores.sum(-1, keepdim=True) + eps
        context = _weighted_sum(scores, v) / score_norm
    return context.to(v.dtype)[..., None, :], (energy, energy_norm, central, scores,
                                               score_norm, context)


class _LinearInfSA(torch.autograd.Function):
    """Context ``h`` of Eq. 21, (B, H, 1, dv); ``k=None`` ties keys to queries."""

    @staticmethod
    def forward(ctx, q, k, v, eps):
        context, saved = _context(q, k, v, eps)
        ctx.save_for_backward(q, k, v, *saved)
        return context

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_context):
        q, k, v, energy, energy_norm, central, scores, score_norm, context = \
            ctx.saved_tensors
        keys = q if k is None else k
        acc = energy.dtype
        grad = grad_context.squeeze(-2).to(acc) / score_norm  # G / (S + eps)
        grad_v = (scores[..., None] * grad[..., None, :]).to(v.dtype)
        grad_z = _project(v, grad) - (grad * context).sum(-1, keepdim=True)
        grad_z = grad_z * (scores > 0)
        grad_central = _weighted_sum(grad_z, keys) / energy_norm  # dm
        grad_energy = -(grad_central * central).sum(-1, keepdim=True)  # dE
        coef = (_project(q, grad_central) + grad_energy) / energy
        coef = coef.masked_fill(energy == 0, 0)
        grad_q = (q * coef[..., None]).addcmul_(energy[..., None],
                                                grad_central[..., None, :])
        if k is None:
            grad_q.addcmul_(grad_z[..., None], central[..., None, :])
            return grad_q.to(q.dtype), None, grad_v, None
        grad_k = (grad_z[..., None] * central[..., None, :]).to(k.dtype)
        return grad_q.to(q.dtype), grad_k, grad_v, None


def torch_linear_infsa_context(q, k, v, eps=1e-6):
    """:func:`mmhybrid.ops.infsa.linear_infsa_context` in PyTorch."""
    k = None if k is q else k
    if (torch.is_grad_enabled() and not torch.jit.is_tracing()
            and any(x is not None and x.requires_grad for x in (q, k, v))):
        return _LinearInfSA.apply(q, k, v, eps)
    return _context(q, k, v, eps)[0]


def linear_infsa_weights(q, k, eps=1e-6):
    r"""The token weight vector :math:`a` of Eq. 16-20 (the Perron-vector surrogate).

    .. math::
        e_i = \|Q_i\|_2,\quad \alpha_i = \frac{e_i}{\sum_j e_j + \epsilon},\quad
        \bar q = \sum_i \alpha_i Q_i,\quad s_j = [\bar q^T K_j]_+,\quad
        a_j = \frac{s_j}{\sum_l s_l + \epsilon}

    Args:
        q, k: (B, heads, N, d); pass ``k=q`` for the paper's tied form.
    Returns:
        (B, heads, N), non-negative, each row sums to 1 (or 0 if all scores are 0).
    """
    scores = _scores(q, k, eps)[-1]
    return scores / (scores.sum(-1, keepdim=True) + eps)
