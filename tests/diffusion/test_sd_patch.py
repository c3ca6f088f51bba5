"""ELFATT-SD patch on a small random diffusers UNet (built from a config, nothing
downloaded); needs diffusers alone. The text-to-image pipeline: test_sd_pipeline.py."""
import math

import pytest
import torch

diffusers = pytest.importorskip('diffusers')

from mmhybrid.diffusion import (StepTracker, ToMeElfattProcessor,  # noqa: E402
                                apply_patch, remove_patch)
from mmhybrid.diffusion import processor as processor_module  # noqa: E402
from mmhybrid.ops.agent import naive_agent_attention  # noqa: E402
from mmhybrid.ops.elfatt import naive_block_attention  # noqa: E402
from mmhybrid.ops.tome import naive_tome_merge, random_dst_mask  # noqa: E402

LATENT = 16  # full-resolution grid 16 x 16 = 256 tokens; a 32 x 32 image
FULL_RES_ATTN = ('down_blocks.0.attentions.0.transformer_blocks.0.attn1.processor',
                 'up_blocks.1.attentions.0.transformer_blocks.0.attn1.processor',
                 'up_blocks.1.attentions.1.transformer_blocks.0.attn1.processor')


def tiny_unet():
    torch.manual_seed(0)
    return diffusers.UNet2DConditionModel(
        sample_size=LATENT, in_channels=4, out_channels=4, layers_per_block=1,
        block_out_channels=(32, 64), norm_num_groups=16, cross_attention_dim=32,
        attention_head_dim=4,  # diffusers reads it as the number of heads
        down_block_types=('CrossAttnDownBlock2D', 'CrossAttnDownBlock2D'),
        up_block_types=('CrossAttnUpBlock2D', 'CrossAttnUpBlock2D')).eval()


def ddim(steps):
    scheduler = diffusers.DDIMScheduler(beta_start=0.00085, beta_end=0.012,
                                        beta_schedule='scaled_linear', clip_sample=False,
                                        set_alpha_to_one=False)
    scheduler.set_timesteps(steps)
    return scheduler


def unet_inputs(batch=2):
    g = torch.Generator().manual_seed(1)
    return (torch.randn(batch, 4, LATENT, LATENT, generator=g),
            torch.randn(batch, 7, 32, generator=g))


@torch.no_grad()
def run(unet, t):
    sample, context = unet_inputs()
    return unet(sample, t, encoder_hidden_states=context).sample


def test_patch_round_trip_is_bit_identical():
    unet = tiny_unet()
    scheduler = ddim(10)
    t = scheduler.timesteps[0]
    originals = unet.attn_processors
    baseline = run(unet, t)
    apply_patch(unet, ratio=0.5, elfatt_steps=0.2, block_size=24, scheduler=scheduler)
    apply_patch(unet, ratio=0.4, elfatt_steps=0.3, block_size=32, scheduler=scheduler)
    patched = unet.attn_processors
    assert {n for n, p in patched.items() if isinstance(p, ToMeElfattProcessor)} == {
        n for n in patched if n.endswith('attn1.processor')}  # cross-attention untouched
    assert all(not isinstance(p.original, ToMeElfattProcessor) for p in patched.values()
               if isinstance(p, ToMeElfattProcessor))  # applying twice does not nest
    changed = run(unet, t)
    assert (changed - baseline).abs().max() > 1e-4
    remove_patch(unet)
    remove_patch(unet)  # no-op when unpatched
    assert all(unet.attn_processors[n] is p for n, p in originals.items())
    assert not unet._forward_pre_hooks
    assert torch.equal(run(unet, t), baseline)


def test_remove_keeps_processors_set_after_patching():
    unet = tiny_unet()
    originals = unet.attn_processors
    apply_patch(unet, ratio=0.5, elfatt_steps=0.0)
    name = FULL_RES_ATTN[0]
    other = diffusers.models.attention_processor.AttnProcessor()
    unet.get_submodule(name[:-len('.processor')]).set_processor(other)
    remove_patch(unet)
    assert unet.attn_processors[name] is other
    assert all(p is originals[n] for n, p in unet.attn_processors.items() if n != name)


def test_ratio_zero_and_no_elfatt_is_the_baseline():
    unet = tiny_unet()
    t = torch.tensor(500)
    baseline = run(unet, t)
    apply_patch(unet, ratio=0.0, elfatt_steps=0.0)
    assert torch.equal(run(unet, t), baseline)


def test_only_full_resolution_self_attention_changes():
    unet = tiny_unet()
    scheduler = ddim(4)
    apply_patch(unet, ratio=0.5, elfatt_steps=1.0, scheduler=scheduler)
    calls = {}

    def spy(name, processor):
        def wrapped(attn, hidden_states, *args, **kwargs):
            out = processor(attn, hidden_states, *args, **kwargs)
            calls[name] = processor.original(attn, hidden_states, *args, **kwargs).equal(out)
            return out
        return wrapped

    processors = unet.attn_processors
    for name, processor in processors.items():
        if isinstance(processor, ToMeElfattProcessor):
            unet.get_submodule(name[:-len('.processor')]).processor = spy(name, processor)
    run(unet, scheduler.timesteps[0])
    assert {n for n, same in calls.items() if not same} == set(FULL_RES_ATTN)
    assert len(calls) == sum(n.endswith('attn1.processor') for n in processors) > 3


def _naive_pool(x, hw, grid):
    H, W = hw
    gh, gw = grid
    x = x.view(x.shape[0], H, W, -1)
    return torch.stack([
        x[:, i * H // gh:-(-(i + 1) * H // gh), j * W // gw:-(-(j + 1) * W // gw)].mean((1, 2))
        for i in range(gh) for j in range(gw)], dim=1)


def naive_processor(attn, h, hw, ratio, mode, block_size, agent_tokens, k_scale2=1.,
                    k_shortcut=0.):
    """ToMe merge -> ELFATT-SD (or agent) attention -> to_out -> unmerge, written
    out with the naive references (dst = top-left token of each 2x2 window)."""
    B, N, C = h.shape
    heads = attn.heads
    merged, groups = naive_tome_merge(h, h, random_dst_mask(hw, (2, 2), None), int(N * ratio))

    def split(t):
        return t.view(B, t.shape[1], heads, -1).transpose(1, 2)

    q, k, v = split(attn.to_q(merged)), split(attn.to_k(merged)), split(attn.to_v(merged))
    gh = round(math.sqrt(agent_tokens * hw[0] / hw[1]))
    agents = split(attn.to_q(_naive_pool(h, hw, (gh, round(agent_tokens / gh)))))
    g = heads if mode == 'agent' else heads // 2
    extras = dict(broadcast_scale=attn.scale**k_scale2, shortcut=k_shortcut)
    out = torch.cat([naive_agent_attention(q[:, :g], k[:, :g], v[:, :g], agents[:, :g],
                                           **extras),
                     naive_block_attention(q[:, g:], k[:, g:], v[:, g:], block_size)], dim=1)
    out = attn.to_out[0](out.transpose(1, 2).reshape(B, -1, C))
    full = torch.empty(B, N, C, dtype=out.dtype)
    for b in range(B):
        for j, members in enumerate(groups[b]):
            full[b, members] = out[b, j]
    return full


@pytest.mark.parametrize('mode,ratio,block_size,extras', [
    ('elfatt', 0.5, 24, {}), ('elfatt', 0.3, 64, {}), ('elfatt', 0.0, 40, {}),
    ('agent', 0.5, 24, dict(k_scale2=0.3, k_shortcut=0.075)),  # Agent-SD's terms
    ('elfatt', 0.5, 24, dict(k_scale2=0.3, k_shortcut=0.075)),
])
def test_processor_matches_naive_reference(mode, ratio, block_size, extras):
    attn = tiny_unet().double().get_submodule(FULL_RES_ATTN[0][:-len('.processor')])
    scheduler = ddim(5)
    tracker = StepTracker(0.2, lambda: scheduler)
    sample = torch.zeros(2, 4, LATENT, LATENT)
    tracker(None, (sample, scheduler.timesteps[0]), {})
    assert tracker.elfatt_active
    attn.set_processor(ToMeElfattProcessor(attn.processor, tracker, ratio, mode, block_size,
                                           agent_tokens=16, max_downsample=1, stride=(2, 2),
                                           use_rand=False, **extras))
    h = torch.randn(2, LATENT * LATENT, 32, dtype=torch.float64)
    with torch.no_grad():
        out = attn(h)
        ref = naive_processor(attn, h, (LATENT, LATENT), ratio, mode, block_size, 16,
                              **extras)
    torch.testing.assert_close(out, ref)
    # after the ELFATT steps: exact attention over the merged tokens (ToMe-SD)
    tracker(None, (sample, scheduler.timesteps[1]), {})
    assert not tracker.elfatt_active
    with torch.no_grad():
        out = attn(h)
        merged, groups = naive_tome_merge(h, h, random_dst_mask((LATENT, LATENT), (2, 2), None),
                                          int(h.shape[1] * ratio))
        exact = attn.processor.original(attn, merged)
    for b in range(2):
        for j, members in enumerate(groups[b]):
            torch.testing.assert_close(out[b, members], exact[b, j].expand(len(members), -1))


SD_BETAS = dict(beta_start=0.00085, beta_end=0.012, beta_schedule='scaled_linear')
UNIFORM_SCHEDULERS = {  # SD 1.x configs and diffusers' defaults: uniform in t
    'DDIM-SD': ('DDIMScheduler', dict(steps_offset=1, set_alpha_to_one=False)),
    'DDIM-trailing': ('DDIMScheduler', dict(timestep_spacing='trailing')),
    'Euler': ('EulerDiscreteScheduler', {}),
    'DPMSolver++': ('DPMSolverMultistepScheduler', {}),
    'LMS': ('LMSDiscreteScheduler', {}),
}


def _active_steps(tracker, timesteps):
    sample = torch.zeros(1, 4, 4, 4)
    flags = []
    for t in timesteps:
        tracker(None, (sample, t), {})
        flags.append(tracker.elfatt_active)
    return flags


@pytest.mark.parametrize('name', UNIFORM_SCHEDULERS)
def test_bare_unet_timestep_rule_follows_the_step_count(name):
    cls, kwargs = UNIFORM_SCHEDULERS[name]
    scheduler = getattr(diffusers, cls)(**SD_BETAS, **kwargs)
    for steps in (10, 20, 50):
        scheduler.set_timesteps(steps)
        for fraction in (0.1, 0.2, 0.3, 0.5):
            exact = _active_steps(StepTracker(fraction, lambda: scheduler),
                                  scheduler.timesteps)
            rule = _active_steps(StepTracker(fraction, None), scheduler.timesteps)
            k = sum(rule)
            assert rule == [True] * k + [False] * (steps - k)  # the first steps
            assert abs(k - sum(exact)) <= 1, (steps, fraction)
            if (steps, fraction) == (50, 0.2):
                assert rule == exact  # the paper's setting


def test_bare_unet_timestep_rule_with_karras_sigmas():
    scheduler = diffusers.DPMSolverMultistepScheduler(**SD_BETAS, use_karras_sigmas=True)
    scheduler.set_timesteps(50)
    rule = _active_steps(StepTracker(0.2, None), scheduler.timesteps)
    k = sum(rule)
    assert rule == [True] * k + [False] * (50 - k) and 10 <= k <= 14  # by noise level


def test_bare_unet_patch_decides_from_the_timestep(monkeypatch):
    unet = tiny_unet()
    baseline = {t: run(unet, torch.tensor(t)) for t in (999, 100)}
    calls = []

    def counting(*args, **kwargs):
        calls.append(1)
        return elfatt_sd_attention(*args, **kwargs)

    elfatt_sd_attention = processor_module.elfatt_sd_attention
    monkeypatch.setattr(processor_module, 'elfatt_sd_attention', counting)
    apply_patch(unet, ratio=0.0, elfatt_steps=0.2, block_size=32, agent_tokens=16)
    high = run(unet, torch.tensor(999))  # t >= 800: ELFATT-SD
    assert len(calls) == len(FULL_RES_ATTN)
    assert (high - baseline[999]).abs().max() > 1e-4
    assert torch.equal(run(unet, torch.tensor(100)), baseline[100])  # ratio 0: exact
    assert len(calls) == len(FULL_RES_ATTN)
    apply_patch(unet, ratio=0.0, elfatt_steps=0.2, num_train_timesteps=100)
    run(unet, torch.tensor(99))  # t >= 80 on a 100-step diffusion
    assert len(calls) == 2 * len(FULL_RES_ATTN)


def test_agent_defaults_per_mode():
    """N/16 agents by default; Eq. 18 (ELFATT-SD) has no Agent-SD extras, the
    Agent-SD mode takes its code's k_scale2 = 0.3 and k_shortcut = 0.075."""
    unet = tiny_unet()
    for mode, extras in (('elfatt', (1., 0.)), ('agent', (0.3, 0.075))):
        apply_patch(unet, mode=mode, elfatt_steps=0.)
        proc = unet.attn_processors[FULL_RES_ATTN[0]]
        assert (proc.agent_tokens, proc.k_scale2, proc.k_shortcut) == (None, *extras)
    apply_patch(unet, mode='agent', k_scale2=1., k_shortcut=0., elfatt_steps=0.)
    proc = unet.attn_processors[FULL_RES_ATTN[0]]
    assert (proc.k_scale2, proc.k_shortcut) == (1., 0.)
    remove_patch(unet)
