"""Behaviour every mmhybrid backbone shares with OpenMMLab's own backbones."""
import torch.nn as nn
import torch.utils.checkpoint as cp
from mmengine.model import BaseModule
from mmengine.model.weight_init import trunc_normal_
from torch.nn.modules.batchnorm import _BatchNorm

from ..utils import load_pretrained


class BaseBackbone(BaseModule):
    """``frozen_stages``, ``norm_eval``, ``with_cp`` and Pretrained ``init_cfg``.

    Subclasses implement :meth:`stage_parts` (what stage ``i`` owns; 0 is the stem),
    extend :meth:`init_scratch` with their own parameters, and call
    :meth:`run_layer` for each layer so that ``with_cp`` applies.

    Args:
        frozen_stages (int): -1 trains everything; 0 freezes the stem; n > 0 also
            freezes stages 1..n (weights fixed, dropout/BN in eval mode).
        norm_eval (bool): keep BatchNorm layers in eval mode while training.
        with_cp (bool): activation checkpointing for every layer.
        init_cfg (dict): ``dict(type='Pretrained', checkpoint=..., prefix=None)``
            loads a bare backbone state dict or a model checkpoint (``backbone.``
            keys found automatically), resizes position embeddings and reports
            missing/unexpected keys. Other initialisers are passed to mmengine.
    """
    pos_embed_keys = ('pos_embed', )
    num_extra_tokens = 0

    def __init__(self, num_stages, frozen_stages=-1, norm_eval=False,
                 with_cp=False, init_cfg=None):
        super().__init__(init_cfg)
        if not -1 <= frozen_stages <= num_stages:
            raise ValueError(f'frozen_stages must be in [-1, {num_stages}], '
                             f'got {frozen_stages}')
        self.frozen_stages = frozen_stages
        self.norm_eval = norm_eval
        self.with_cp = with_cp

    def stage_parts(self, index):
        """Modules and parameters owned by stage ``index`` (0 = stem)."""
        raise NotImplementedError

    def init_scratch(self):
        """Transformer defaults for training from scratch: truncated-normal (0.02)
        linear weights and position embeddings, zero biases, unit LayerNorms."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                trunc_normal_(m.weight, std=.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        for key in self.pos_embed_keys:
            if getattr(self, key, None) is not None:
                trunc_normal_(getattr(self, key), std=.02)

    @staticmethod
    def convert_checkpoint(state_dict):
        """Map a public checkpoint layout to ours; identity by default."""
        return state_dict

    def run_layer(self, layer, *args):
        if self.with_cp and self.training and any(
                getattr(a, 'requires_grad', False) for a in args):
            return cp.checkpoint(layer, *args, use_reentrant=False)
        return layer(*args)

    def init_weights(self):
        self.init_scratch()
        cfg = self.init_cfg
        if isinstance(cfg, dict) and cfg.get('type') == 'Pretrained':
            load_pretrained(
                self, cfg['checkpoint'], prefix=cfg.get('prefix'),
                pos_embed_keys=self.pos_embed_keys,
                num_extra_tokens=self.num_extra_tokens,
                converter=self.convert_checkpoint)
        elif cfg is not None:
            super().init_weights()
        self._is_init = True
        self._freeze_stages()

    def _freeze_stages(self):
        for index in range(self.frozen_stages + 1):
            for part in self.stage_parts(index):
                if isinstance(part, nn.Parameter):
                    part.requires_grad = False
                    continue
                part.eval()
                for param in part.parameters():
                    param.requires_grad = False

    def train(self, mode=True):
        super().train(mode)
        self._freeze_stages()
        if mode and self.norm_eval:
            for m in self.modules():
                if isinstance(m, _BatchNorm):
                    m.eval()
        return self
