"""LinearizationDistiller: layer pairing, Stage I (InfiniteVL Eq. 3) and Stage II
(Eq. 4 adapted) on tiny backbones."""
import copy

import pytest
import torch
import torch.nn as nn

from mmhybrid.layers import Block
from mmhybrid.models.distillers import (LinearizationDistiller, blocks_per_stage,
                                        pair_layers)
from mmhybrid.models.distillers.layer_pairs import teacher_index
from mmhybrid.registry import build_model
from tools.tiny_backbones import TINY_BACKBONES

ARCH = dict(embed_dims=16, depths=(2, 2, 2, 2), num_heads=(2, 2, 4, 4))
SWIN = dict(type='SwinELFATT', attn='local', downsample='linear', arch=ARCH,
            window_size=4, drop_path_rate=0.)
ELFATT = dict(type='SwinELFATT', attn='elfatt', downsample='linear', arch=ARCH,
              block_sizes=(8, 8, 16, 8), drop_path_rate=0.)
SOLA = dict(type='SoLAVision', head_dim=8, drop_path_rate=0.,
            arch=dict(embed_dims=(16, 32, 64, 128), schedule='LL/LL/LS/LS',
                      hsb_routes=(((1, 2), (3, 2)), ((3, 1), (4, 2)))))


def _distiller(teacher=SWIN, backbone=ELFATT, **kwargs):
    model = LinearizationDistiller(copy.deepcopy(teacher), copy.deepcopy(backbone),
                                   **kwargs)
    model.init_weights()
    return model.train()


class _Layer(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)


def _stages(*depths, widths=(96, 192, 384, 768)):
    return [[_Layer(w) for _ in range(d)] for d, w in zip(depths, widths)]


def test_teacher_index_spreads_evenly_keeping_first_and_last():
    # SoLA-B's 16 stage-3 layers against Swin-B's 18
    ks = [teacher_index(j, 16, 18) for j in range(16)]
    assert ks[0] == 0 and ks[-1] == 17
    assert all(b > a for a, b in zip(ks, ks[1:]))  # distinct, in order
    assert max(b - a for a, b in zip(ks, ks[1:])) == 2  # two teacher layers skipped
    assert [teacher_index(j, 6, 6) for j in range(6)] == list(range(6))
    assert teacher_index(0, 1, 2) == 0
    pairs = pair_layers(_stages(2, 2, 18, 2), _stages(2, 2, 16, 2))
    assert [k for (_, j), (i, k) in pairs if i == 2] == ks


@pytest.mark.parametrize('teacher, student, message', [
    ((2, 2, 6, 2), (2, 2, 6), r'student has 3 stages, the teacher 4'),
    ((2, 2, 6, 2), (2, 2, 7, 2), r'stage 3: the student has 7 layers, the teacher 6'),
])
def test_pair_layers_refuses_other_layouts(teacher, student, message):
    with pytest.raises(ValueError, match=message):
        pair_layers(_stages(*teacher), _stages(*student))


def test_pair_layers_refuses_other_widths():
    with pytest.raises(ValueError, match=r'stage 2: the student is 128 channels '
                       r'wide, the teacher 192'):
        pair_layers(_stages(2, 2, 6, 2),
                    _stages(2, 2, 6, 2, widths=(96, 128, 384, 768)))


@pytest.mark.parametrize('name, depths', [
    ('SoLAVision', (2, 2, 6, 2)), ('InfiniteVLVision', (2, 2, 4, 2)),
    ('SwinELFATT', (2, 2, 2, 2)), ('CSWin', (1, 2, 2, 1)), ('InfViT', (4, )),
    ('HAViT', (4, ))])
def test_blocks_per_stage_lists_every_backbone(name, depths):
    stages = blocks_per_stage(build_model(TINY_BACKBONES[name]))
    assert tuple(map(len, stages)) == depths
    assert all(isinstance(b, Block) for s in stages for b in s)


def test_layerwise_trains_only_the_replaced_mixers():
    model = _distiller()
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    # ELFATT (and stage 4's global attention) replaced Swin's window attention;
    # the FFNs are Swin's: they stay frozen
    assert trainable and all(n.startswith('backbone.stages.') and '.attn.' in n
                             for n in trainable)
    assert len({n.split('.attn.')[0] for n in trainable}) == 8
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = model(torch.randn(2, 3, 64, 64), mode='loss')
    assert sorted(losses) == [f'loss_layer{s}_{l}' for s in (1, 2, 3, 4)
                              for l in (1, 2)]
    sum(losses.values()).backward()
    optimizer.step()
    for name, param in model.named_parameters():
        if name in trainable:
            assert param.grad is not None and not torch.equal(param, before[name]), name
        else:
            assert param.grad is None and torch.equal(param, before[name]), name


def test_layerwise_all_trains_whole_layers_only():
    model = _distiller(trainable='all')
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert any('.ffn.' in n for n in trainable)
    assert any('.norm1.' in n for n in trainable)
    # stem, merges and output norms do not run in Stage I
    assert all(n.startswith('backbone.stages.') and '.blocks.' in n for n in trainable)


def test_student_layers_take_the_teachers_inputs():
    model = _distiller()
    seen = {}

    def record(name):
        def hook(module, args):
            seen.setdefault(name, []).append(args[0].detach().clone())
        return hook

    for who in ('teacher', 'backbone'):
        for i, stage in enumerate(blocks_per_stage(getattr(model, who))):
            for j, block in enumerate(stage):
                block.register_forward_pre_hook(record((who, i, j)))
    model(torch.randn(2, 3, 64, 64), mode='loss')
    for i, stage in enumerate(blocks_per_stage(model.backbone)):
        for j in range(len(stage)):
            (student, ), (teacher, ) = seen[('backbone', i, j)], seen[('teacher', i, j)]
            assert torch.equal(student, teacher)


def test_layerwise_sola_student_runs_no_bridge():
    model = _distiller(backbone=SOLA)
    assert model.backbone.bridges  # built, but Stage I leaves them out
    for bridge in model.backbone.bridges.values():
        bridge.register_forward_hook(lambda *_: pytest.fail('a bridge ran'))
        assert not any(p.requires_grad for p in bridge.parameters())
    # backbone.stages.i.j.<part>
    trainable = {n.split('.')[4] for n, p in model.named_parameters()
                 if p.requires_grad}
    assert trainable == {'attn', 'ffn'}  # WKV / softmax mixers, channel-mix / conv MLPs
    losses = model(torch.randn(2, 3, 64, 64), mode='loss')
    assert len(losses) == 8 and all(torch.isfinite(v) for v in losses.values())
    errors = model.relative_errors(torch.randn(2, 3, 64, 64))
    assert set(errors) == {(s, l) for s in (1, 2, 3, 4) for l in (1, 2)}
    assert all(e > 0 for e in errors.values())


def test_layerwise_plain_vit_with_checkpointing():
    vit = dict(type='InfViT', img_size=64, patch_size=16, drop_path_rate=0.,
               out_indices=(3, ), arch=dict(embed_dims=32, depth=4, num_heads=4,
                                            mlp_ratio=2., attn_types='S'))
    student = dict(vit, attn_types='LLSL', with_cp=True)
    model = _distiller(teacher=vit, backbone=student)
    assert [k for _, k in model.pairs] == [(0, k) for k in range(4)]
    sum(model(torch.randn(2, 3, 64, 64), mode='loss').values()).backward()
    grads = [p.grad for p in model.backbone.layers[0].attn.parameters()]
    assert all(g is not None for g in grads)
    assert model.backbone.layers[2].attn.qkv.weight.grad is None  # softmax kept


def test_nothing_replaced_is_an_error():
    with pytest.raises(ValueError, match="nothing is replaced; use trainable='all'"):
        LinearizationDistiller(copy.deepcopy(SWIN), copy.deepcopy(SWIN))


def test_head_belongs_to_stage_two():
    with pytest.raises(ValueError, match="stage='end_to_end'"):
        LinearizationDistiller(copy.deepcopy(SWIN), copy.deepcopy(ELFATT),
                               head=dict(num_classes=4, in_channels=128))


def test_end_to_end_needs_the_same_outputs():
    with pytest.raises(ValueError, match=r'teacher outputs stages \(0, 1, 2, 3\), '
                       r'the student \(1, 2, 3\)'):
        LinearizationDistiller(copy.deepcopy(SWIN), dict(ELFATT, out_indices=(1, 2, 3)),
                               stage='end_to_end')


def test_end_to_end_with_the_teachers_head(tmp_path):
    teacher = build_model(SWIN)
    head = nn.Linear(128, 4)
    # an mmpretrain classifier checkpoint: backbone.*, head.fc.*
    state = {**{f'backbone.{k}': v for k, v in teacher.state_dict().items()},
             'head.fc.weight': head.weight.detach(), 'head.fc.bias': head.bias.detach()}
    path = str(tmp_path / 'swin_toy.pth')
    torch.save(dict(state_dict=state), path)
    pretrained = dict(type='Pretrained', checkpoint=path)
    model = _distiller(dict(SWIN, init_cfg=pretrained),
                       dict(ELFATT, init_cfg=pretrained),
                       stage='end_to_end', head=dict(num_classes=4, in_channels=128),
                       temperature=2.)
    assert torch.equal(model.teacher_head.weight, head.weight)
    assert torch.equal(model.head.weight, head.weight)  # the student's starts as a copy
    assert torch.equal(model.teacher.norm3.weight, teacher.norm3.weight)
    losses = model(torch.randn(2, 3, 64, 64), mode='loss')
    assert sorted(losses) == ['loss_feat0', 'loss_feat1', 'loss_feat2', 'loss_feat3',
                              'loss_logits']
    sum(losses.values()).backward()
    assert all(p.grad is None for p in model.teacher.parameters())
    assert model.teacher_head.weight.grad is None
    assert model.head.weight.grad is not None
    assert all(p.grad is not None for p in model.backbone.parameters())
    assert not model.teacher.training  # frozen teacher stays in eval mode
    outs = model(torch.randn(1, 3, 64, 64), mode='tensor')
    assert [o.shape[1] for o in outs] == [16, 32, 64, 128]


def test_end_to_end_refuses_a_checkpoint_without_that_head(tmp_path):
    path = str(tmp_path / 'no_head.pth')
    torch.save(dict(state_dict=build_model(SWIN).state_dict()), path)
    model = LinearizationDistiller(
        dict(SWIN, init_cfg=dict(type='Pretrained', checkpoint=path)),
        copy.deepcopy(ELFATT), stage='end_to_end',
        head=dict(num_classes=4, in_channels=128))
    with pytest.raises(ValueError, match=r'no classifier of shape .*\(4, 128\)'):
        model.init_weights()


@pytest.mark.parametrize('stage', ['layerwise', 'end_to_end'])
def test_losses_in_float32_under_autocast(stage):
    """As under ``--amp``: low-precision matmuls, the losses reduced in fp32."""
    head = dict(num_classes=4, in_channels=128) if stage == 'end_to_end' else None
    model = _distiller(backbone=SOLA, stage=stage, head=head)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        losses = model(torch.randn(2, 3, 64, 64), mode='loss')
    assert all(v.dtype == torch.float32 and torch.isfinite(v) for v in losses.values())
    sum(losses.values()).backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
