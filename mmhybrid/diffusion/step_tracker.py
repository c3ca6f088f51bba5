"""Which denoising step a UNet call belongs to: read from the scheduler's schedule,
or, for a bare UNet without one, from the timestep's noise level."""
import math

import torch


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

    def __init__(self, elfatt_steps, get_scheduler, seed=0,
                 num_train_timesteps=1000):
        self.elfatt_steps = elfatt_steps
        self.get_scheduler = get_scheduler
        self.seed = seed
        self.min_elfatt_timestep = (1 - elfatt_steps) * num_train_timesteps
        self.generator = torch.Generator()
        self.latent_hw = None
        self.step_index = None
        self.num_steps = None
        self.elfatt_active = False

    def __call__(self, module, args, kwargs):
        sample = args[0] if args else kwargs['sample']
        timestep = args[1] if len(args) > 1 else kwargs['timestep']
        t = float(torch.as_tensor(timestep).flatten()[0])
        self.latent_hw = tuple(sample.shape[-2:])
        self.generator.manual_seed(self.seed + round(t * 1000))
        if self.elfatt_steps <= 0:
            self.elfatt_active = False
            return None
        if self.get_scheduler is None:
            self.elfatt_active = t >= self.min_elfatt_timestep
            return None
        timesteps = self.get_scheduler().timesteps
        if timesteps is None:
            raise RuntimeError('scheduler.timesteps is not set: call '
                               'scheduler.set_timesteps() before the UNet')
        distance = (torch.as_tensor(timesteps).detach().to('cpu', torch.float64) - t).abs()
        self.step_index = int(distance.argmin())
        self.num_steps = len(timesteps)
        num_elfatt = math.floor(self.elfatt_steps * self.num_steps + 0.5)
        self.elfatt_active = self.step_index < num_elfatt
        return None
