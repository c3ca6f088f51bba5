"""``apply_patch`` / ``remove_patch`` for diffusers Stable Diffusion UNets, and the
UNet hook that tells which denoising step a call belongs to."""
import math

import torch

from .processor import ToMeElfattProcessor

_PATCH_ATTR = '_mmhybrid_elfatt_patch'
AGENT_EXTRAS = {'elfatt': (1., 0.), 'agent': (0.3, 0.075)}


class StepTracker:
    """A UNet forward pre-hook recording, for the call about to run: the latent
    size, the denoising step index, whether ELFATT is on, and a ToMe generator
    seeded from ``seed`` and the timestep (cond and uncond passes of one step,
    and repeated runs, merge alike).

    With ``get_scheduler``, the step index is the position of the call's timestep
    in ``scheduler.timesteps`` (the nearest one), so it follows any number of
    steps, CFG batches or a scheduler swapped after patching; ELFATT is on for
    the first ``round(elfatt_steps * len(timesteps))`` steps. Without one (a bare
    UNet), ELFATT is on while ``t >= (1 - elfatt_steps) * num_train_timesteps``:
    with SD's uniform spacings, the same first steps within one
    (tests/diffusion/test_sd_patch.py); Karras sigmas follow the noise level.
    """

    def __init__(self, elfatt_steps, get_scheduler, seed=0, num_train_timesteps=1000):
        self.elfatt_steps, self.get_scheduler, self.seed = elfatt_steps, get_scheduler, seed
        self.min_elfatt_timestep = (1 - elfatt_steps) * num_train_timesteps
        self.generator = torch.Generator()
        self.latent_hw = self.step_index = None
        self.elfatt_active = False

    def __call__(self, module, args, kwargs):
        sample = args[0] if args else kwargs['sample']
        timestep = args[1] if len(args) > 1 else kwargs['timestep']
        t = float(torch.as_tensor(timestep).flatten()[0])
        self.latent_hw = tuple(sample.shape[-2:])
        self.generator.manual_seed(self.seed + round(t * 1000))
        if self.elfatt_steps <= 0 or self.get_scheduler is None:
            self.elfatt_active = self.elfatt_steps > 0 and t >= self.min_elfatt_timestep
            return
        timesteps = self.get_scheduler().timesteps
        if timesteps is None:
            raise RuntimeError('scheduler.timesteps is not set: call '
                               'scheduler.set_timesteps() before the UNet')
        distance = (torch.as_tensor(timesteps).detach().to('cpu', torch.float64) - t).abs()
        self.step_index = int(distance.argmin())
        self.elfatt_active = self.step_index < math.floor(self.elfatt_steps * len(timesteps) + 0.5)


def _unet(pipe_or_unet):
    return getattr(pipe_or_unet, 'unet', pipe_or_unet)


def _is_patchable(name, attn):
    """Self-attention of a transformer block whose processor output is the plain
    attention (no residual, norm or rescale inside), as attn1 of SD 1.x/2.x."""
    return (name.endswith('attn1.processor') and not attn.is_cross_attention
            and attn.group_norm is None and attn.spatial_norm is None
            and not attn.residual_connection and attn.rescale_output_factor == 1.0)


def apply_patch(pipe_or_unet, ratio=0.5, elfatt_steps=0.2, block_size=128,
                agent_tokens=None, mode='elfatt', k_scale2=None, k_shortcut=None,
                max_downsample=1, stride=(2, 2), use_rand=True, seed=0,
                scheduler=None, num_train_timesteps=None):
    """Patch the self-attention of a Stable Diffusion UNet with ELFATT-SD.

    ToMe-SD merging (``ratio`` of the tokens; 0: off) runs at every step; during
    the first ``elfatt_steps`` of the scheduler's steps attention is ELFATT-SD
    (Eq. 18/19; 0: plain ToMe-SD). Cross-attention is untouched; applying twice
    replaces the first patch.

    Args:
        pipe_or_unet: a diffusers pipeline (``.unet``, ``.scheduler``) or a UNet.
        block_size (int): tokens per block of the local heads.
        agent_tokens (int, optional): agents of the global heads; None: one per
            4x4 window of the latent grid (N/16, Agent-SD's count).
        mode (str): ``'elfatt'`` (half the heads global, half local) or
            ``'agent'`` (every head agent attention, Agent-SD style).
        k_scale2, k_shortcut (float, optional): the agent broadcast softmax's
            logit scale ``d ** (-0.5 * k_scale2)`` and a ``k_shortcut * V`` added
            to the agent heads; None: Eq. 18's (1, 0) for ``'elfatt'``,
            Agent-SD's code (0.3, 0.075) for ``'agent'``.
        max_downsample (int): patch layers whose grid is at most this many times
            smaller than the latent (1: the full-resolution blocks only).
        stride (tuple): (sy, sx) ToMe window holding one dst token.
        use_rand (bool), seed (int): random dst position per window, its seed.
        scheduler: whose ``timesteps`` the steps are counted in (default: the
            pipeline's, read at every call). A bare UNet without one is in
            ELFATT while ``t >= (1 - elfatt_steps) * num_train_timesteps``
            (default: the scheduler's config, else 1000).
    """
    if not 0 <= ratio < 1:
        raise ValueError(f'ratio must be in [0, 1), got {ratio}')
    if not 0 <= elfatt_steps <= 1:
        raise ValueError(f'elfatt_steps must be in [0, 1], got {elfatt_steps}')
    if block_size < 1:
        raise ValueError(f'block_size must be >= 1, got {block_size}')
    if mode not in AGENT_EXTRAS:
        raise ValueError(f"mode must be 'elfatt' or 'agent', got {mode!r}")
    k_scale2 = AGENT_EXTRAS[mode][0] if k_scale2 is None else k_scale2
    k_shortcut = AGENT_EXTRAS[mode][1] if k_shortcut is None else k_shortcut
    get_scheduler = None
    if scheduler is not None:
        get_scheduler = lambda: scheduler  # noqa: E731
    elif hasattr(pipe_or_unet, 'scheduler'):
        get_scheduler = lambda: pipe_or_unet.scheduler  # noqa: E731
    if num_train_timesteps is None:
        num_train_timesteps = getattr(getattr(get_scheduler and get_scheduler(), 'config',
                                              None), 'num_train_timesteps', 1000)
    remove_patch(pipe_or_unet)
    unet = _unet(pipe_or_unet)
    tracker = StepTracker(elfatt_steps, get_scheduler, seed, num_train_timesteps)
    originals = unet.attn_processors
    unet.set_attn_processor({
        name: ToMeElfattProcessor(processor, tracker, ratio, mode, block_size, agent_tokens,
                                  max_downsample, tuple(stride), use_rand, k_scale2, k_shortcut)
        if _is_patchable(name, unet.get_submodule(name[:-len('.processor')])) else processor
        for name, processor in originals.items()})
    hook = unet.register_forward_pre_hook(tracker, with_kwargs=True)
    setattr(unet, _PATCH_ATTR, (originals, hook))
    return pipe_or_unet


def remove_patch(pipe_or_unet):
    """Undo :func:`apply_patch`: our processors go back to the exact original
    objects (processors set by someone else since are kept); no-op if unpatched."""
    unet = _unet(pipe_or_unet)
    patch = getattr(unet, _PATCH_ATTR, None)
    if patch is None:
        return pipe_or_unet
    originals, hook = patch
    unet.set_attn_processor({
        name: originals[name] if isinstance(processor, ToMeElfattProcessor) else processor
        for name, processor in unet.attn_processors.items()})
    hook.remove()
    delattr(unet, _PATCH_ATTR)
    return pipe_or_unet
