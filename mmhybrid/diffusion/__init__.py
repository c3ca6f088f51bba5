"""Training-free ELFATT-SD for diffusers Stable Diffusion (ELFATT Appendix H).

``apply_patch(pipe, ratio=0.5, elfatt_steps=0.2)`` / ``remove_patch(pipe)``, in
the spirit of ``tomesd``. Needs ``diffusers`` only through the objects passed in
(``pip install mmhybrid[sd]``); importing this package does not import it.
"""
from .patch import StepTracker, apply_patch, remove_patch
from .processor import ToMeElfattProcessor, elfatt_sd_attention

__all__ = [
    'apply_patch', 'remove_patch', 'elfatt_sd_attention', 'ToMeElfattProcessor',
    'StepTracker'
]
