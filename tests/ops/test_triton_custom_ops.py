"""The Triton paths are torch.library custom ops whose fake kernels give the shapes,
dtypes and strides the kernels produce, so torch.compile / torch.export trace
through them without running a kernel (checked here on CPU, no GPU needed; the
real kernels are compared with their fakes by opcheck in the interpreter tests)."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

pytest.importorskip('triton')

from mmhybrid.ops.elfatt import fused as effatt_fused  # noqa: E402
from mmhybrid.ops.infsa import fused as infsa_fused  # noqa: E402
from mmhybrid.ops.wkv import fused as wkv_fused  # noqa: E402


def head_views(B, H, N, d, dtype):
    return torch.randn(B, N, H * d, dtype=dtype).view(B, N, H, d).transpose(1, 2)


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_fake_forward_and_backward_shapes(dtype):
    with FakeTensorMode():
        q, k, v = (head_views(2, 3, 37, 12, dtype).requires_grad_() for _ in range(3))
        out = effatt_fused.effatt_forward(q, k, v)[0]
        assert out.shape == (2, 3, 37, 12) and out.dtype == dtype
        grads = torch.autograd.grad(out.sum(), (q, k, v))
        assert all(g.shape == t.shape and g.stride() == t.stride()
                   for g, t in zip(grads, (q, k, v)))

        for tied in (False, True):
            ctx = infsa_fused.linear_infsa_forward(q, None if tied else k, v, 1e-6)[0]
            assert ctx.shape == (2, 3, 1, 12) and ctx.dtype == dtype
            leaves = (q, v) if tied else (q, k, v)
            grads = torch.autograd.grad(ctx.sum(), leaves)
            assert [g.shape for g in grads] == [t.shape for t in leaves]

        w, u = (torch.zeros(20, requires_grad=True) for _ in range(2))
        kk, vv = (torch.randn(2, 130, 20, dtype=dtype, requires_grad=True)
                  for _ in range(2))
        y, den, carry, key_max = wkv_fused.bi_wkv_forward(w, u, kk, vv)
        assert y.shape == vv.shape and y.dtype == dtype
        assert carry.shape == (2, 3, 4, 20) and key_max.shape == (2, 20)
        grads = torch.autograd.grad(y.sum(), (w, u, kk, vv))
        assert [g.shape for g in grads] == [(20, ), (20, ), kk.shape, vv.shape]


def test_export_sees_the_ops():
    """torch.export traces a module that calls the ops into a graph that holds
    them (the kernels never run: export works on fake tensors)."""

    class Mixer(torch.nn.Module):

        def forward(self, q, k, v, w, u):
            out = effatt_fused.effatt_forward(q, k, v)[0]
            out = out + infsa_fused.linear_infsa_forward(q, k, v, 1e-6)[0]
            return out, wkv_fused.bi_wkv_forward(w, u, q[:, 0], v[:, 0])[0]

    args = [torch.randn(1, 2, 16, 8) for _ in range(3)] + [torch.zeros(8)] * 2
    graph = torch.export.export(Mixer(), tuple(args)).graph_module.code
    for name in ('effatt_forward', 'linear_infsa_forward', 'bi_wkv_forward'):
        assert f'mmhybrid.{name}' in graph, graph
