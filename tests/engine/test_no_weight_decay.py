"""Modules say which parameters take no weight decay; our optimizer constructor
honours it on top of the config's paramwise_cfg."""
import torch.nn as nn

from mmhybrid.engine import PlainGroupsOptimWrapperConstructor
from mmhybrid.engine.optim_wrapper_constructor import no_weight_decay_names
from tools.tiny_backbones import build_tiny


def _groups(model, **paramwise_cfg):
    constructor = PlainGroupsOptimWrapperConstructor(
        dict(optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05)),
        paramwise_cfg or None)
    groups = constructor(model).optimizer.param_groups
    by_param = {id(p): g for g in groups for p in g['params']}
    return {name: by_param[id(p)] for name, p in model.named_parameters()}


class Model(nn.Module):
    def __init__(self, backbone):
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(4, 4)


def test_declared_parameters_take_no_decay():
    model = Model(build_tiny('SoLAVision', mixers='LG/LG/LLSLGS/LS'))
    names = set(no_weight_decay_names(model))
    assert {'backbone.stages.0.0.attn.spatial_decay', 'backbone.stages.0.0.attn.spatial_first',
            'backbone.stages.0.1.attn.A_log', 'backbone.stages.0.1.attn.dt_bias',
            'backbone.stages.0.1.attn.o_norm.weight', 'backbone.pos_embed'} <= names
    assert not any('qkv' in n or 'ffn' in n for n in names)
    groups = _groups(model)
    for name, group in groups.items():
        assert group['weight_decay'] == (0. if name in names else 0.05), name


def test_config_settings_of_the_same_parameters_are_kept():
    model = Model(build_tiny('InfViT'))
    groups = _groups(model, custom_keys={'backbone': dict(lr_mult=0.1)})
    gamma = groups['backbone.layers.0.attn.gamma_logit']
    assert gamma['weight_decay'] == 0. and gamma['lr'] == 1e-4
    assert groups['backbone.cls_token']['weight_decay'] == 0.
    weight = groups['backbone.layers.0.attn.q.weight']
    assert weight['weight_decay'] == 0.05 and weight['lr'] == 1e-4
    assert groups['head.weight']['lr'] == 1e-3
