"""``with_cp=True`` (activation checkpointing) gives the loss and every gradient
of the plain backbone, for every backbone."""
import pytest
import torch

import mmhybrid  # noqa: F401

from tools.tiny_backbones import NAMES, build_tiny


@pytest.mark.parametrize('name', NAMES)
def test_with_cp_same_loss_and_gradients(name):
    plain = build_tiny(name).train()
    ckpt = build_tiny(name, with_cp=True).train()
    ckpt.load_state_dict(plain.state_dict())
    x = torch.randn(2, 3, 48, 80)
    losses = []
    for model in (plain, ckpt):
        torch.manual_seed(0)  # the same draws (HAViT's random H_0) in both runs
        outs = model(x)
        loss = sum(o.square().mean() for o in outs)
        loss.backward()
        losses.append(loss.detach())
    torch.testing.assert_close(losses[0], losses[1])
    grads = dict(plain.named_parameters())
    checked = 0
    for key, param in ckpt.named_parameters():
        ref = grads[key].grad
        assert (param.grad is None) == (ref is None), key
        if ref is not None:
            torch.testing.assert_close(param.grad, ref, msg=key)
            checked += 1
    assert checked == sum(p.requires_grad for p in plain.parameters())
