"""Gated delta rule: chunked WY/UT form vs the per-token recurrence, dispatch, fla."""
import pytest
import torch

from mmhybrid.ops import gated_delta_rule
from mmhybrid.ops.delta_rule import (chunk_gated_delta_rule, default_backend,
                                     fla_gated_delta_rule, l2norm,
                                     naive_gated_delta_rule)
from mmhybrid.ops.delta_rule.recurrence import affine_recurrence, state_recurrence


def inputs(B, T, H, K, V, dtype=torch.float64, decay=0.5, state=True,
           device='cpu'):
    q, k = torch.randn(2, B, T, H, K, dtype=dtype, device=device)
    v = torch.randn(B, T, H, V, dtype=dtype, device=device)
    g = -decay * torch.rand(B, T, H, dtype=dtype, device=device)
    beta = torch.rand(B, T, H, dtype=dtype, device=device)
    h0 = (torch.randn(B, H, K, V, dtype=dtype, device=device) if state else None)
    return q, k, v, g, beta, h0


def run(fn, q, k, v, g, beta, h0, final=True, l2norm=True, **kwargs):
    return fn(q, k, v, g, beta, initial_state=h0, output_final_state=final,
              use_qk_l2norm_in_kernel=l2norm, **kwargs)


def grads(fn, args, **kwargs):
    args = [a.detach().requires_grad_() if a is not None else None for a in args]
    o, state = run(fn, *args, **kwargs)
    torch.manual_seed(1)  # the same weights whatever the dtype and layout of o
    loss = (o * torch.randn(o.shape, dtype=torch.float64).to(o.dtype)).sum()
    if state is not None:
        loss = loss + state.sin().sum()
    loss.backward()
    return [o, state] + [a.grad for a in args if a is not None]


def test_recurrence_is_the_papers_equation_transposed():
    """InfiniteVL Eq. 2 with S_t (V x K) read by S_t q_t equals our M_t = S_t^T."""
    B, T, H, K, V = 1, 6, 2, 4, 3
    q, k, v, g, beta, _ = inputs(B, T, H, K, V, state=False)
    k = l2norm(k)
    S = torch.zeros(B, H, V, K, dtype=q.dtype)
    eye = torch.eye(K, dtype=q.dtype)
    outs = []
    for t in range(T):
        kt, vt = k[:, t], v[:, t]  # (B, H, K), (B, H, V)
        a, b = g[:, t].exp()[..., None, None], beta[:, t][..., None, None]
        S = S @ (a * (eye - b * kt[..., :, None] * kt[..., None, :])) + \
            b * vt[..., :, None] * kt[..., None, :]
        outs.append(K**-0.5 * (S @ q[:, t, :, :, None])[..., 0])
    o, state = naive_gated_delta_rule(q, k, v, g, beta, output_final_state=True)
    torch.testing.assert_close(o, torch.stack(outs, 1))
    torch.testing.assert_close(state, S.transpose(-1, -2))


@pytest.mark.parametrize('T', [1, 7, 197, 1030])
def test_chunk_matches_naive_forward_and_gradients(T):
    args = inputs(2, T, 2, 8, 6)
    ref = grads(naive_gated_delta_rule, args)
    for chunk_size in (16, 32, 64) if T > 7 else (4, 32):
        out = grads(chunk_gated_delta_rule, args, chunk_size=chunk_size)
        for name, a, b in zip(('o', 'state', 'q', 'k', 'v', 'g', 'beta', 'h0'),
                              out, ref):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9,
                                       msg=f'{name}, chunk {chunk_size}')


@pytest.mark.parametrize('T', [1, 15, 16, 17, 33, 50])
@pytest.mark.parametrize('state', [False, True])
def test_segments_match_naive_at_their_boundaries(T, state):
    """Segments of 16 tokens (4 chunks of 4): lengths of one token, a segment
    minus / plus one, two segments plus one; with and without an initial state."""
    args = inputs(2, T, 2, 8, 6, state=state)
    ref = grads(naive_gated_delta_rule, args)
    out = grads(chunk_gated_delta_rule, args, chunk_size=4, segment_size=16)
    for name, a, b in zip(('o', 'state', 'q', 'k', 'v', 'g', 'beta', 'h0'), out,
                          ref):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9, msg=name)


def naive_both(q, k, v, g, beta, **kwargs):
    """The naive rule on the sequences and their reverses, read-outs summed."""
    o, state = naive_gated_delta_rule(
        *(torch.cat((x, x.flip(1))) for x in (q, k, v, g, beta)), **kwargs)
    return o[:len(q)] + o[len(q):].flip(1), state


@pytest.mark.parametrize('T', [1, 17, 50])
def test_bidirectional_matches_naive_on_both_directions(T):
    """Segment j of the sequences batched with segment j of their reverses (4
    chunks of 4 per segment), forward and gradients, with a (2B) initial state;
    and the other backends' generic form (naive here)."""
    args = inputs(2, T, 2, 8, 6)[:5] + (torch.randn(4, 2, 8, 6, dtype=torch.float64), )
    ref = grads(naive_both, args)
    out = grads(chunk_gated_delta_rule, args, chunk_size=4, segment_size=16,
                bidirectional=True)
    out_naive = grads(gated_delta_rule, args, backend='naive', bidirectional=True)
    for name, a, b, c in zip(('o', 'state', 'q', 'k', 'v', 'g', 'beta', 'h0'),
                             out, ref, out_naive):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9, msg=name)
        torch.testing.assert_close(c, b, rtol=1e-12, atol=1e-12, msg=name)


def test_segment_size_does_not_change_the_result():
    """Streaming is the same computation: any segment length (rounded up to whole
    chunks), with and without gradients, gives the same output and state."""
    args = inputs(1, 77, 3, 8, 8)
    full = run(chunk_gated_delta_rule, *args, chunk_size=8, segment_size=10**6)
    for segment in (1, 8, 20, 64):
        with torch.no_grad():
            out = run(chunk_gated_delta_rule, *args, chunk_size=8,
                      segment_size=segment)
        for a, b in zip(out, full):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    ref = grads(chunk_gated_delta_rule, args, chunk_size=8, segment_size=10**6)
    out = grads(chunk_gated_delta_rule, args, chunk_size=8, segment_size=24)
    for a, b in zip(out, ref):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match='segment_size'):
        run(chunk_gated_delta_rule, *args, segment_size=0)


@pytest.mark.parametrize('l2norm', [False, True])
def test_chunk_backward_passes_gradcheck(l2norm):
    """The hand-written backward vs finite differences: 3 chunks of 2, padded."""
    args = [a.requires_grad_() for a in inputs(1, 5, 2, 3, 2)]
    q, k, v, g, beta, h0 = args

    def fn(*args):
        return run(chunk_gated_delta_rule, *args, l2norm=l2norm, chunk_size=2)

    assert torch.autograd.gradcheck(fn, args)


@pytest.mark.parametrize('l2norm', [False, True])
def test_chunk_gradients_without_initial_or_final_state(l2norm):
    args = inputs(2, 197, 3, 8, 5, state=False)
    ref = grads(naive_gated_delta_rule, args, final=False, l2norm=l2norm)
    out = grads(chunk_gated_delta_rule, args, final=False, l2norm=l2norm)
    assert out[1] is None
    for name, a, b in zip(('o', 'state', 'q', 'k', 'v', 'g', 'beta'), out, ref):
        if a is None:
            continue
        # without the L2 norm the values grow to ~1e7 and g's gradient (a
        # reverse cumulative sum) cancels down to ~1e-2 in places: tolerate
        # 1e-12 of the tensor's scale there (1e-9 for values of order 1)
        atol = 1e-12 * max(1e3, b.abs().max().item())
        torch.testing.assert_close(a, b, rtol=1e-9, atol=atol, msg=name)


@pytest.mark.parametrize('chunk_size', [0, 3, 24])
def test_chunk_size_must_be_a_power_of_two(chunk_size):
    args = inputs(1, 20, 2, 4, 4)
    with pytest.raises(ValueError, match='power of two'):
        run(chunk_gated_delta_rule, *args, chunk_size=chunk_size)


def test_chunk_without_initial_state_and_odd_head_dims():
    q, k, v, g, beta, _ = inputs(3, 45, 5, 5, 11, state=False)
    for h0 in (None, torch.zeros(3, 5, 5, 11, dtype=q.dtype)):
        a = run(naive_gated_delta_rule, q, k, v, g, beta, h0)
        b = run(chunk_gated_delta_rule, q, k, v, g, beta, h0, chunk_size=8)
        torch.testing.assert_close(b[0], a[0])
        torch.testing.assert_close(b[1], a[1])


@pytest.mark.parametrize('decay', [0., 30.])
def test_no_decay_and_strong_decay(decay):
    """g = 0 (plain delta rule) and g down to -30 a token: finite and exact."""
    args = inputs(1, 100, 2, 8, 8, decay=decay)
    ref = grads(naive_gated_delta_rule, args)
    out = grads(chunk_gated_delta_rule, args)
    for a, b in zip(out, ref):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def test_bfloat16_inputs():
    args = inputs(2, 300, 3, 16, 16)
    ref, _ = run(naive_gated_delta_rule, *args)
    low = [a.bfloat16().requires_grad_() for a in args]
    o, state = run(chunk_gated_delta_rule, *low)
    assert o.dtype == torch.bfloat16 and state.dtype == torch.float32
    err = (o.double() - ref).abs().max() / ref.abs().max()
    assert err < 2e-2, err
    ref_grads = grads(naive_gated_delta_rule, args)
    low_grads = grads(chunk_gated_delta_rule, low)
    for name, a, b in zip(('o', 'state', 'q', 'k', 'v', 'g', 'beta', 'h0'),
                          low_grads, ref_grads):
        assert a.dtype == (torch.float32 if name == 'state' else torch.bfloat16)
        err = (a.double() - b).abs().max() / b.abs().max()
        assert err < 3e-2, (name, err.item())


def test_chunk_ignores_autocast():
    """Under bf16 autocast the op still computes (and differentiates) in fp32."""
    args = inputs(1, 40, 2, 8, 8, dtype=torch.float32)
    ref = grads(chunk_gated_delta_rule, args)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        out = grads(chunk_gated_delta_rule, args)
    for a, b in zip(out, ref):
        torch.testing.assert_close(a, b)


def test_dispatch_and_errors(monkeypatch):
    args = inputs(1, 20, 2, 4, 4, state=False)[:5]
    expected = chunk_gated_delta_rule(*args)[0]
    monkeypatch.delenv('MMHYBRID_BACKEND', raising=False)
    assert default_backend('cpu') == 'chunk'
    torch.testing.assert_close(gated_delta_rule(*args)[0], expected)
    torch.testing.assert_close(gated_delta_rule(*args, backend='naive')[0],
                               expected)
    monkeypatch.setenv('MMHYBRID_BACKEND', 'torch')
    assert default_backend('cuda') == 'torch'
    torch.testing.assert_close(gated_delta_rule(*args)[0], expected)
    monkeypatch.setenv('MMHYBRID_BACKEND', 'gated_delta_rule=fla')
    with pytest.raises((ImportError, ValueError), match='fla'):
        gated_delta_rule(*args)
    monkeypatch.setenv('MMHYBRID_BACKEND', 'gated_delta_rule=triton')
    with pytest.raises(ValueError, match='MMHYBRID_BACKEND'):
        gated_delta_rule(*args)
    monkeypatch.delenv('MMHYBRID_BACKEND')
    with pytest.raises(KeyError, match='unknown gated_delta_rule backend'):
        gated_delta_rule(*args, backend='cuda')
    q, k, v, g, beta = args
    with pytest.raises(ValueError, match=r'\(B, T, H, K\)'):
        gated_delta_rule(q, k[:, :10], v, g, beta)
    with pytest.raises(ValueError, match='g and beta'):
        gated_delta_rule(q, k, v, g[..., :1], beta)


@pytest.mark.cuda
@pytest.mark.skipif(fla_gated_delta_rule() is None, reason='needs fla')
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_fla_agrees_with_chunk(dtype):
    args = inputs(2, 517, 4, 32, 64, dtype=dtype, device='cuda')
    ours = grads(chunk_gated_delta_rule, args, chunk_size=64)
    theirs = grads(gated_delta_rule, args, backend='fla')
    tol = 2e-3 if dtype == torch.float32 else 5e-2
    for name, a, b in zip(('o', 'state', 'q', 'k', 'v', 'g', 'beta', 'h0'),
                          theirs, ours):
        err = (a.float() - b.float()).abs().max() / b.float().abs().max()
        assert err < tol, (name, err.item())


def test_compiled_recurrence_op_has_the_loops_gradients():
    """The custom op torch.compile sees (and its reverse-recurrence backward)
    against autograd through the Python loop, in float64."""
    torch.manual_seed(0)
    trans = (0.3 * torch.randn(5, 2, 4, 4, dtype=torch.float64)).requires_grad_()
    bias = torch.randn(5, 2, 4, 3, dtype=torch.float64, requires_grad=True)
    state = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    weights = [torch.randn(5, 2, 4, 3, dtype=torch.float64),
               torch.randn(2, 4, 3, dtype=torch.float64)]
    results = []
    for fn in (state_recurrence, affine_recurrence):
        outs = fn(trans, bias, state)
        grads = torch.autograd.grad(sum((o * w).sum() for o, w in zip(outs, weights)),
                                    (trans, bias, state))
        results.append([o.detach() for o in outs] + list(grads))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_inductor_compiles_the_chunk_form_without_fullgraph():
    """``torch.compile`` as mmengine's ``compile=True`` calls it (inductor, graph
    breaks allowed): inductor's lowering of ``scan`` needs a whole-graph capture
    (torch 2.14), so under torch.compile the recurrence is a custom op."""
    import torch._dynamo
    torch.manual_seed(0)
    args = [t.float() for t in inputs(1, 40, 2, 4, 4, state=False)[:5]]

    def op(q, k, v, g, beta):
        return chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=8,
                                      segment_size=16,
                                      use_qk_l2norm_in_kernel=True)[0]

    results = []
    torch._dynamo.reset()
    for fn in (op, torch.compile(op)):
        leaves = [t.clone().requires_grad_() for t in args]
        out = fn(*leaves)
        out.pow(2).sum().backward()
        results.append([out.detach()] + [t.grad for t in leaves])
    torch._dynamo.reset()
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_chunk_traces_whole_for_export_and_compile():
    """No graph break and no host read-back: torch.export of the inference path
    and torch.compile(fullgraph=True) of forward + backward both trace it."""
    args = [t.float() for t in inputs(1, 40, 2, 4, 4, state=False)[:5]]

    def op(q, k, v, g, beta):
        return chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=8,
                                      segment_size=16,
                                      use_qk_l2norm_in_kernel=True)[0]

    class Op(torch.nn.Module):
        def forward(self, *args):
            return op(*args)

    with torch.no_grad():
        exported = torch.export.export(Op(), tuple(args)).module()
        torch.testing.assert_close(exported(*args), op(*args))
    leaves = [t.requires_grad_() for t in args]
    ref = grads(chunk_gated_delta_rule, leaves + [None], final=False,
                chunk_size=8, segment_size=16)
    compiled = torch.compile(op, fullgraph=True, backend='eager')
    out = compiled(*leaves)
    torch.manual_seed(1)
    (out * torch.randn(out.shape, dtype=torch.float64).float()).sum().backward()
    for a, b in zip([out] + [t.grad for t in leaves], [ref[0]] + ref[2:]):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize('M, size', [(32, 2), (32, 16), (8, 1), (4, 4)])
def test_diagonal_blocks_traced_form_and_unit_lower_inverse(monkeypatch, M, size):
    """The reshape form of the diagonal blocks (used under a tracer) equals the
    diagonal view, and the block-doubling inverse is the inverse."""
    from mmhybrid.ops.delta_rule import chunk
    a = torch.randn(3, M, M, dtype=torch.float64)
    view = chunk.diagonal_blocks(a, size)
    monkeypatch.setattr(chunk, 'is_tracing', lambda: True)
    assert torch.equal(chunk.diagonal_blocks(a, size), view)
    for j in range(M // size):
        assert torch.equal(view[:, j], a[:, j * size:(j + 1) * size,
                                         j * size:(j + 1) * size])
    unit_lower = torch.eye(M, dtype=a.dtype) + a.tril(-1)
    torch.testing.assert_close(chunk.unit_lower_inverse(a),
                               torch.linalg.inv(unit_lower), rtol=1e-9, atol=1e-9)
