"""What is exported: a config's backbone, its mmseg segmentor up to the raw logits,
its mmdet two-stage detector (``detector_graph.TwoStageDetections``), or a backbone
type built from arguments, in eval mode.

mmseg's pyramid pooling (PPM, UPerNet's head) uses ``nn.AdaptiveAvgPool2d``, which
the ONNX exporters cannot size from dynamic H and W; the segmentor is exported with
:class:`ExportableAdaptiveAvgPool2d` in its place, the same bins written as two
small pooling matrices built from the input size.
"""
import torch
import torch.nn as nn
from mmengine.utils import to_2tuple


class ExportableAdaptiveAvgPool2d(nn.Module):
    """``nn.AdaptiveAvgPool2d`` as pooling matrices: bin i of n over a side of S
    covers [floor(i S / n), ceil((i + 1) S / n)), averaged; ``P_h x P_w^T``."""

    def __init__(self, output_size):
        super().__init__()
        self.output_size = to_2tuple(output_size)

    @staticmethod
    def _bins(n, size, like):
        i = torch.arange(n, device=like.device)[:, None]
        pos = torch.arange(size, device=like.device)[None, :]
        inside = (pos >= i * size // n) & (pos < ((i + 1) * size + n - 1) // n)
        inside = inside.to(like.dtype)
        return inside / inside.sum(-1, keepdim=True)  # (n, size)

    def forward(self, x):
        H, W = x.shape[-2:]
        nh, nw = (s if n is None else n for n, s in zip(self.output_size, (H, W)))
        return self._bins(nh, H, x) @ x @ self._bins(nw, W, x).T


class SegmentorLogits(nn.Module):
    """An mmseg ``EncoderDecoder`` from images to raw logits (backbone, neck,
    decode head; what mmdeploy exports as ``seg_logits`` before resizing); its
    ``nn.AdaptiveAvgPool2d`` are swapped for :class:`ExportableAdaptiveAvgPool2d`
    in place."""

    def __init__(self, segmentor):
        super().__init__()
        pools = [(parent, name, child) for parent in segmentor.modules()
                 for name, child in parent.named_children()
                 if type(child) is nn.AdaptiveAvgPool2d]
        for parent, name, pool in pools:
            setattr(parent, name, ExportableAdaptiveAvgPool2d(pool.output_size))
        self.segmentor = segmentor

    def forward(self, x):
        return self.segmentor._forward(x)


def build(spec, checkpoint=None, part='backbone', cfg_options=None):
    """The model to export, in eval mode: a config's backbone, segmentor graph
    (``'segmentor'``), detector graph (``'detector'``) or whole model (``'model'``),
    or a backbone type built from ``cfg_options``."""
    import mmhybrid  # noqa: F401  registers our models
    from mmengine.model import revert_sync_batchnorm

    from mmhybrid.utils import load_model_checkpoint
    if spec.endswith('.py'):
        from tools._common import load_config
        from mmengine.registry import MODELS, init_default_scope
        cfg = load_config(spec, cfg_options)
        init_default_scope(cfg.get('default_scope', 'mmhybrid'))
        model_cfg = cfg.model
        if 'pretrained' in model_cfg:
            model_cfg.pretrained = None
        if 'backbone' in model_cfg:
            model_cfg.backbone.init_cfg = None
        model = MODELS.build(model_cfg)
    else:
        from mmhybrid.registry import build_model
        model = build_model(dict(type=spec, **(cfg_options or {})))
    if checkpoint:
        load_model_checkpoint(model, checkpoint)
    model = revert_sync_batchnorm(model)
    if part == 'segmentor':
        if not hasattr(model, 'decode_head'):
            raise SystemExit(f'{spec}: --part segmentor needs an mmseg EncoderDecoder')
        model = SegmentorLogits(model)
    elif part == 'detector':
        from tools.deploy.detector_graph import TwoStageDetections
        try:
            model = TwoStageDetections(model)
        except ValueError as err:
            raise SystemExit(f'{spec}: --part detector: {err}')
    elif part == 'backbone' and hasattr(model, 'backbone'):
        model = model.backbone
    model.eval()  # some backbones' train() returns None: not chained
    return model
