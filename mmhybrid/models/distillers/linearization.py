"""Distil a softmax Transformer backbone into a linear / hybrid one (InfiniteVL
Sec. 3.3, Fig. 3, Eq. 3-4), for dense-prediction backbones.

The student (``backbone``) starts from the teacher's weights (its ``init_cfg``
Pretrained reads the teacher checkpoint; each new mixer has its own rule), then:

* Stage I, ``stage='layerwise'`` (Eq. 3): the teacher runs once, frozen; every
  student layer takes the input of its paired teacher layer (the output of the
  teacher's previous layer) and learns the teacher layer's output by MSE, all
  layers in one pass. Only the replaced parts train by default.
* Stage II, ``stage='end_to_end'`` (Eq. 4 adapted): the whole student runs on the
  teacher's images; MSE on every output map (the backbones' normed outputs), plus
  ``T^2 KL(teacher || student)`` of the class logits with a classifier head.

The student is called ``backbone``, so a checkpoint of this model loads into our
UPerNet / Mask R-CNN configs through ``init_cfg=dict(type='Pretrained',
checkpoint=...)`` (``backbone.`` keys are found there).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as cp
from mmengine.logging import print_log
from mmengine.model import BaseModel

from mmhybrid.layers import MixerState
from mmhybrid.registry import build_model, register_model
from mmhybrid.utils.checkpoint import load_checkpoint
from ..utils import extract_state_dict
from .block_recorder import record_blocks
from .layer_pairs import block_width, blocks_per_stage, pair_layers

STAGES = ('layerwise', 'end_to_end')
TRAINABLE = ('replaced', 'all')
# classifier weights in a teacher checkpoint: mmpretrain / timm (head.fc),
# official Swin, DeiT and older timm (head), mmpretrain ViT (head.layers.head)
HEAD_PREFIXES = ('head.fc.', 'head.layers.head.', 'head.')
DEFAULT_PREPROCESSOR = dict(type='ImgDataPreprocessor', mean=[123.675, 116.28, 103.53],
                            std=[58.395, 57.12, 57.375], bgr_to_rgb=True)


def _pretrained_checkpoint(init_cfg):
    """The checkpoint a backbone's ``init_cfg`` loads, or None."""
    cfgs = [init_cfg] if isinstance(init_cfg, dict) else list(init_cfg or [])
    return next((c['checkpoint'] for c in cfgs if c.get('type') == 'Pretrained'),
                None)


def _relative_mse(out, target):
    """``||out - target||^2 / ||target||^2`` over the batch."""
    return (F.mse_loss(out.float(), target.float()) /
            target.float().pow(2).mean().clamp_min(1e-12))


@register_model()
class LinearizationDistiller(BaseModel):
    """Teacher -> student distillation of backbones, Stage I or II of InfiniteVL.

    Args:
        teacher (dict): the teacher backbone: ours, built with the teacher's
            architecture (e.g. ``SwinELFATT(arch='t', attn='local',
            downsample='linear')`` for Swin, ``InfViT`` with softmax layers for
            DeiT / ViT), its weights from ``init_cfg=dict(type='Pretrained',
            checkpoint=...)``. Frozen, always in eval mode, never in the graph.
        backbone (dict): the student backbone, same number of stages and widths;
            a stage may have fewer layers than the teacher's.
        stage (str): ``'layerwise'`` (Stage I, Eq. 3) or ``'end_to_end'``
            (Stage II, Eq. 4 adapted to dense prediction).
        trainable (str, optional): ``'replaced'``: only the student's mixers
            (``attn``) and MLPs (``ffn``) whose class differs from their paired
            teacher layer's; ``'all'``: in Stage I every parameter of every
            student layer (stem, merges, output norms and Hidden State Bridges do
            not run in Stage I and stay frozen), in Stage II the whole student
            and its head. None: ``'replaced'`` in Stage I, ``'all'`` in Stage II.
            The student's own ``frozen_stages`` still applies.
        head (dict, optional): Stage II only: ``dict(num_classes=...,
            in_channels=...)``, a linear classifier on the global average of the
            last output map. The teacher's comes from its checkpoint (``head.fc``,
            ``head`` or ``head.layers.head`` weights), the student's (``head``)
            starts as a copy of it; adds the KL loss ``loss_logits``. Swin's
            classifier averages its last map like this; a ViT's reading the class
            token does not: distil ViTs without a head.
        temperature (float): softmax temperature of the KL loss.
        feature_weight (float): weight of each output map's MSE (Stage II).
        logit_weight (float): weight of the KL loss (Stage II).
        data_preprocessor (dict, optional): batching and mean/std (default:
            ImageNet mean/std, BGR -> RGB).
        init_cfg (dict, optional): mmengine initialisers of this model.
    """

    def __init__(self, teacher, backbone, stage='layerwise', trainable=None,
                 head=None, temperature=1., feature_weight=1., logit_weight=1.,
                 data_preprocessor=None, init_cfg=None):
        super().__init__(data_preprocessor=data_preprocessor or DEFAULT_PREPROCESSOR,
                         init_cfg=init_cfg)
        if stage not in STAGES:
            raise ValueError(f'stage must be one of {STAGES}, got {stage!r}')
        trainable = trainable or ('replaced' if stage == 'layerwise' else 'all')
        if trainable not in TRAINABLE:
            raise ValueError(f'trainable must be one of {TRAINABLE}, got {trainable!r}')
        if head is not None and stage != 'end_to_end':
            raise ValueError("head (the KL loss on logits) belongs to stage="
                             "'end_to_end'; Stage I distils layer outputs only")
        if temperature <= 0:
            raise ValueError(f'temperature must be positive, got {temperature}')
        self.stage = stage
        self.trainable = trainable
        self.temperature = temperature
        self.feature_weight = feature_weight
        self.logit_weight = logit_weight

        self.teacher = build_model(teacher)
        self.backbone = build_model(backbone)
        self.teacher.requires_grad_(False)
        self.teacher.eval()
        self.pairs = None
        if stage == 'layerwise' or trainable == 'replaced':
            self.pairs = pair_layers(blocks_per_stage(self.teacher),
                                     blocks_per_stage(self.backbone))
        if stage == 'end_to_end':
            self._check_outputs()
        self.teacher_head = self.head = None
        if head is not None:
            self.teacher_head = nn.Linear(head['in_channels'], head['num_classes'])
            self.teacher_head.requires_grad_(False)
            self.head = nn.Linear(head['in_channels'], head['num_classes'])
        self._select_trainable()

    def _check_outputs(self):
        """Stage II compares the output maps: same outputs, same widths."""
        t, s = self.teacher.out_indices, self.backbone.out_indices
        if t != s:
            raise ValueError(f'the teacher outputs stages {t}, the student {s}: '
                             'Stage II compares them one to one; give both the same '
                             'out_indices')
        for i, (t_blocks, s_blocks) in enumerate(zip(
                blocks_per_stage(self.teacher), blocks_per_stage(self.backbone))):
            w_t, w_s = block_width(t_blocks[0]), block_width(s_blocks[0])
            if w_t != w_s:
                raise ValueError(f'stage {i + 1}: the student is {w_s} channels wide, '
                                 f'the teacher {w_t}; Stage II compares their outputs')

    def _select_trainable(self):
        if self.trainable == 'all' and self.stage == 'end_to_end':
            return  # the student as built (its frozen_stages apply)
        self.backbone.requires_grad_(False)
        if self.head is not None:
            self.head.requires_grad_(False)
        teacher, student = (blocks_per_stage(self.teacher),
                            blocks_per_stage(self.backbone))
        for (i, j), (_, k) in self.pairs:
            block, paired = student[i][j], teacher[i][k]
            if self.trainable == 'all':
                block.requires_grad_(True)
                continue
            for name in ('attn', 'ffn'):
                if type(getattr(block, name)) is not type(getattr(paired, name)):
                    getattr(block, name).requires_grad_(True)
        self.backbone.train(self.backbone.training)  # re-applies frozen_stages
        if not any(p.requires_grad for p in self.parameters()):
            raise ValueError(
                "trainable='replaced': every student layer has its paired teacher "
                "layer's mixer and MLP classes, nothing is replaced; use "
                "trainable='all' to train the student's layers")

    def train(self, mode=True):
        super().train(mode)
        self.teacher.eval()  # frozen: no dropout / drop path, BN statistics kept
        return self

    def init_weights(self):
        """The backbones' initialisers (the teacher checkpoint, the student's
        inheritance), then the teacher's classifier and the student's copy."""
        super().init_weights()
        if self.head is None:
            return
        checkpoint = _pretrained_checkpoint(self.teacher.init_cfg)
        if checkpoint is None:
            print_log('LinearizationDistiller: the teacher has no Pretrained '
                      'init_cfg: its classifier head is random', logger='current',
                      level=30)
        else:
            self.teacher_head.load_state_dict(self._teacher_head_state(checkpoint))
        self.head.load_state_dict(self.teacher_head.state_dict())

    def _teacher_head_state(self, checkpoint):
        state = extract_state_dict(load_checkpoint(checkpoint, map_location='cpu'))
        if any(k.startswith('backbone.') for k in state):  # an mmpretrain model
            state = {k: v for k, v in state.items() if not k.startswith('backbone.')}
        shape = tuple(self.teacher_head.weight.shape)
        for prefix in HEAD_PREFIXES:
            weight = state.get(prefix + 'weight')
            if weight is not None and tuple(weight.shape) == shape:
                print_log(f'LinearizationDistiller: teacher head {shape} loaded from '
                          f'{prefix}weight/bias of {checkpoint}', logger='current')
                return dict(weight=weight, bias=state[prefix + 'bias'])
        found = {p + 'weight': tuple(state[p + 'weight'].shape) for p in HEAD_PREFIXES
                 if p + 'weight' in state}
        raise ValueError(
            f'{checkpoint} has no classifier of shape (num_classes, in_channels) = '
            f'{shape} under {", ".join(p + "weight" for p in HEAD_PREFIXES)} (found '
            f'{found or "none"}): fix head=dict(num_classes=..., in_channels=...) or '
            'drop head to distil the output maps only')

    # Stage I -------------------------------------------------------------
    def layer_outputs(self, inputs):
        """Yield ``((stage, layer), student output, teacher output)`` (1-based)
        for every paired layer, each student layer run on its teacher layer's
        input with a fresh :class:`MixerState` (Eq. 3; no bridges)."""
        if self.pairs is None:
            raise RuntimeError("layer_outputs pairs layers: build with stage="
                               "'layerwise' or trainable='replaced'")
        teacher = blocks_per_stage(self.teacher)
        needed = {key: teacher[key[0]][key[1]] for _, key in self.pairs}
        with torch.no_grad(), record_blocks(needed) as records:
            self.teacher(inputs)
        student = blocks_per_stage(self.backbone)
        for (i, j), key in self.pairs:
            if key not in records:
                raise RuntimeError(
                    f'teacher stage {i + 1} layer {key[1] + 1} did not run: its '
                    f'out_indices {self.teacher.out_indices} stop before it; give '
                    'the teacher out_indices up to its last stage')
            x, hw, target = records[key]
            block = student[i][j]
            if self.backbone.with_cp and self.training:
                out, _ = cp.checkpoint(block, x, hw, MixerState(), use_reentrant=False)
            else:
                out, _ = block(x, hw, MixerState())
            yield (i + 1, j + 1), out, target

    @torch.no_grad()
    def relative_errors(self, inputs):
        """``{(stage, layer): MSE / mean square of the teacher output}`` of every
        paired layer (1-based), for reports before / after Stage I."""
        return {key: _relative_mse(out, target).item()
                for key, out, target in self.layer_outputs(inputs)}

    def layerwise_loss(self, inputs):
        """Eq. 3: one MSE per paired layer, ``loss_layer<stage>_<layer>``."""
        return {f'loss_layer{s}_{l}': F.mse_loss(out.float(), target.float())
                for (s, l), out, target in self.layer_outputs(inputs)}

    # Stage II ------------------------------------------------------------
    def end_to_end_loss(self, inputs):
        """MSE on every output map (``loss_feat<i>``) and, with a head,
        ``T^2 KL(softmax(z_t / T) || softmax(z_s / T))`` (``loss_logits``)."""
        with torch.no_grad():
            targets = self.teacher(inputs)
        outs = self.backbone(inputs)
        losses = {f'loss_feat{i}': self.feature_weight *
                  F.mse_loss(out.float(), target.float())
                  for i, out, target in zip(self.backbone.out_indices, outs, targets)}
        if self.head is not None:
            t = self.temperature
            with torch.no_grad():
                teacher_logits = self.teacher_head(targets[-1].float().mean((2, 3)))
            logits = self.head(outs[-1].float().mean((2, 3)))
            losses['loss_logits'] = self.logit_weight * t**2 * F.kl_div(
                F.log_softmax(logits / t, -1), F.log_softmax(teacher_logits / t, -1),
                reduction='batchmean', log_target=True)
        return losses

    def forward(self, inputs, data_samples=None, mode='tensor'):
        """``'loss'``: the stage's loss dict; ``'tensor'`` / ``'predict'``: the
        student's output maps."""
        if mode == 'loss':
            return (self.layerwise_loss(inputs) if self.stage == 'layerwise'
                    else self.end_to_end_loss(inputs))
        if mode in ('tensor', 'predict'):
            return self.backbone(inputs)
        raise ValueError(f"mode must be 'loss', 'tensor' or 'predict', got {mode!r}")
