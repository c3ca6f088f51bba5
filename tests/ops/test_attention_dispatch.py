"""One dispatch for exact softmax attention: SDPA on CPU, flash-attn where it can run."""
import pytest
import torch
import torch.nn.functional as F

from mmhybrid.ops import agent_attention, block_attention
from mmhybrid.ops.attention import (attention_backend, flash, flash_unusable_reason,
                                    softmax_attention)

ENV = 'MMHYBRID_BACKEND'


def qkv(*shape, dtype=torch.float32, device='cpu'):
    return [torch.randn(*shape, dtype=dtype, device=device) for _ in range(3)]


@pytest.mark.parametrize('shape', [(2, 3, 17, 8), (2, 5, 3, 7, 12), (1, 1, 1, 4)])
def test_cpu_picks_sdpa_and_equals_it(shape, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    q, k, v = qkv(*shape)
    assert attention_backend(q, k, v) == 'sdpa'
    for scale in (None, 0.3):
        torch.testing.assert_close(softmax_attention(q, k, v, scale=scale),
                                   F.scaled_dot_product_attention(q, k, v, scale=scale),
                                   rtol=0, atol=0)
    # cross attention (agent broadcast): fewer keys than queries
    k, v = k[..., :2, :], v[..., :2, :]
    torch.testing.assert_close(softmax_attention(q, k, v),
                               F.scaled_dot_product_attention(q, k, v), rtol=0, atol=0)


def test_dropout_is_passed_through():
    q, k, v = qkv(1, 2, 16, 8)
    torch.manual_seed(1)
    out = softmax_attention(q, k, v, dropout_p=0.5)
    torch.manual_seed(1)
    torch.testing.assert_close(out,
                               F.scaled_dot_product_attention(q, k, v, dropout_p=0.5))
    assert not torch.allclose(out, softmax_attention(q, k, v))


def test_env_var_and_backend_argument(monkeypatch):
    q, k, v = qkv(1, 2, 5, 8)
    monkeypatch.setenv(ENV, 'softmax_attention=sdpa')
    assert attention_backend(q, k, v) == 'sdpa'
    monkeypatch.setenv(ENV, 'torch')
    assert attention_backend(q, k, v) == 'sdpa'
    monkeypatch.setenv(ENV, 'auto')
    assert attention_backend(q, k, v) == 'sdpa'
    monkeypatch.setenv(ENV, 'softmax_attention=bogus')
    with pytest.raises(ValueError, match="unknown softmax_attention backend 'bogus'"):
        softmax_attention(q, k, v)
    monkeypatch.setenv(ENV, 'triton')  # a name attention lacks: automatic choice
    assert attention_backend(q, k, v) == 'sdpa'
    monkeypatch.setenv(ENV, 'flash')
    assert attention_backend(q, k, v, backend='sdpa') == 'sdpa'  # argument wins


def test_forcing_flash_on_cpu_raises_a_clear_error(monkeypatch):
    q, k, v = qkv(1, 2, 5, 8)
    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(RuntimeError, match='"flash" was requested .* cannot run: '):
        softmax_attention(q, k, v, backend='flash')
    # with flash-attn present the reason is the device, not the installation
    monkeypatch.setattr(flash, 'flash_attn_func', lambda *a, **kw: None)
    assert 'needs CUDA tensors' in flash_unusable_reason(q, k, v)
    monkeypatch.setattr(flash, 'flash_attn_func', None)
    assert 'not installed' in flash_unusable_reason(q, k, v)


def test_every_exact_attention_goes_through_the_dispatch(monkeypatch):
    """Forcing an unusable backend makes each caller raise: none calls SDPA directly."""
    from mmhybrid.layers.mixers import (CrossShapedWindowAttention, ELFATTAttention,
                                        SoftmaxAttention)

    x = torch.randn(1, 16, 8)
    q, k, v = qkv(1, 2, 16, 4)
    calls = {
        'block_attention': lambda: block_attention(q, k, v, 5),
        'agent_attention': lambda: agent_attention(q, k, v, q[:, :, :3]),
        'SoftmaxAttention': lambda: SoftmaxAttention(8, 2, lepe=True)(x, (4, 4)),
        'ELFATTAttention': lambda: ELFATTAttention(8, 2, block_size=4)(x, (4, 4)),
        'CSWin stripes': lambda: CrossShapedWindowAttention(8, 2, split_size=2)(
            x, (4, 4)),
    }
    for name, call in calls.items():
        monkeypatch.setenv(ENV, 'softmax_attention=sdpa')
        call()
        monkeypatch.setenv(ENV, 'softmax_attention=flash')
        with pytest.raises(RuntimeError, match='cannot run'):
            call()
            pytest.fail(f'{name} did not use the attention dispatch')


def test_padded_cswin_stripes_keep_the_masked_path(monkeypatch):
    """A padded stripe needs its mask: SDPA with attn_mask, never the flash path."""
    from mmhybrid.layers.mixers import CrossShapedWindowAttention
    monkeypatch.setenv(ENV, 'flash')
    CrossShapedWindowAttention(8, 2, split_size=3)(torch.randn(1, 16, 8), (4, 4))


@pytest.mark.cuda
@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
@pytest.mark.parametrize('shape', [(2, 3, 197, 64), (1, 2, 4, 49, 32), (2, 4, 1000, 16)])
def test_cuda_flash_matches_sdpa(shape, dtype):
    pytest.importorskip('flash_attn')
    q, k, v = (t.requires_grad_() for t in qkv(*shape, dtype=dtype, device='cuda'))
    assert attention_backend(q, k, v) == 'flash'
    out = softmax_attention(q, k, v, scale=0.2)
    ref = softmax_attention(q, k, v, scale=0.2, backend='sdpa')
    torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-3)
    g = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), g),
                    torch.autograd.grad(ref, (q, k, v), g)):
        torch.testing.assert_close(a, b, rtol=2e-2, atol=5e-3)
    odd = [t.detach()[..., :12] for t in (q, k, v)]  # head size 12: not a multiple of 8
    assert attention_backend(*odd) == 'sdpa'
