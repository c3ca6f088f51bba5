"""Bad input gives one error that names the problem and the fix (one test per case).

Checkpoint files: tests/utils/test_checkpoints.py. The messages are listed in
docs/design.md ("Errors and bad input").
"""
import importlib
import re
import sys
from pathlib import Path

import pytest
import torch

from mmhybrid.models.backbones import CSWin, InfViT, SoLAVision, SwinELFATT
from mmhybrid.models.backbones.base_backbone import ArchError, resolve_arch
from mmhybrid.models.backbones.sola_vision import ARCH_ZOO as SOLA_ARCHS

ROOT = Path(__file__).resolve().parents[2]
SEG_CONFIG = ROOT / 'configs/sola/demo/upernet_sola-t_toy-ade.py'
TINY = {
    SoLAVision: dict(arch=dict(embed_dims=(16, 16, 32, 32), schedule='L/L/LS/S',
                               hsb_routes=()), head_dim=16),
    SwinELFATT: dict(arch=dict(embed_dims=16, depths=(1, 1, 2, 1),
                               num_heads=(1, 2, 2, 4)),
                     window_size=4, block_sizes=(8, 8, 8, 8)),
    CSWin: dict(arch=dict(embed_dims=16, depths=(1, 1, 2, 1), num_heads=(1, 2, 2, 4),
                          split_sizes=(1, 2, 2, 2)), block_sizes=(8, 8, 8, 8)),
    InfViT: dict(arch=dict(embed_dims=32, depth=2, num_heads=4, mlp_ratio=2.,
                           attn_types='PL'), patch_size=8, img_size=32),
}
BACKBONES = list(TINY)


def tiny(cls, **kwargs):
    return cls(**{**TINY[cls], **kwargs})


def raises(exc, *fragments):
    """pytest.raises whose message must contain every fragment (literally)."""
    return pytest.raises(exc, match=''.join(f'(?=[\\s\\S]*{re.escape(f)})'
                                            for f in fragments))


# ------------------------------------------------------------------ model args
@pytest.mark.parametrize('cls,bad,valid', [
    (SoLAVision, 'x', ["'t' ('tiny')", "'s' ('small')", "'b' ('base')"]),
    (SwinELFATT, 's', ["'t' ('tiny')", "'b' ('base')"]),
    (CSWin, 'small', ["'t' ('tiny')", "'b' ('base')"]),
    (InfViT, 'vit-b', ["'linear-4l'", "'pure-b'"]),
])
def test_unknown_arch_names_the_valid_ones(cls, bad, valid):
    with raises(ArchError, f'unknown {cls.__name__} arch {bad!r}', *valid, 'dict with'):
        cls(arch=bad)
    with pytest.raises(KeyError):  # still what upstream callers catch
        cls(arch=bad)


@pytest.mark.parametrize('zoo,alias,key', [
    (SOLA_ARCHS, 'Tiny', 't'), (SwinELFATT.arch_zoo, 'tiny', 't'),
    (CSWin.arch_zoo, 'base', 'b')])
def test_upstream_arch_aliases(zoo, alias, key):
    assert resolve_arch(alias, zoo, 'X', ()) == zoo[key]


def test_arch_dict_missing_keys():
    with raises(ValueError, "lacks ['mixers']", 'embed_dims, mixers'):
        SoLAVision(arch=dict(embed_dims=(8, 8, 8, 8)))


def test_unknown_mixer_letter_lists_the_registered_mixers():
    with raises(KeyError, "unknown mixer 'Q' in stage 2", "'wkv' (L)", "'softmax' (S)",
                "'gated_deltanet' (G)", 'docs/contributing.md'):
        SoLAVision(mixers='LL/LQ/LLSLLS/LS')


def test_unknown_attention_plan_names_presets_and_letters():
    with raises(ValueError, "unknown attention plan 'foo'", "'elfatt'", "'local'",
                'one pattern per stage (4)', "'E,E,GE,G'", 'E ELFATT', 'L local',
                'mixers='):
        tiny(SwinELFATT, attn='foo')
    with raises(ValueError, "unknown attention plan 'E,E,GX,G'", 'G global softmax'):
        tiny(CSWin, attn='E,E,GX,G')


@pytest.mark.parametrize('make,fragments', [
    (lambda: SoLAVision(mixers='LL/LL/LLSLLS'),
     ['has 3 stages, the backbone has 4', "'/' between stages"]),
    (lambda: tiny(SwinELFATT, attn='E,E,G'),
     ["unknown attention plan 'E,E,G'", 'one pattern per stage (4)']),
    (lambda: tiny(SwinELFATT, depths=(2, 2, 6)),
     ['SwinELFATT: depths needs one entry per stage (4), got (2, 2, 6)']),
    (lambda: tiny(CSWin, num_heads=(1, 2, 4, 8, 16)),
     ['CSWin: num_heads needs one entry per stage (4)']),
    (lambda: tiny(InfViT, attn_types='PLP'),
     ["stage 1 of InfViT mixers=", 'names 3 layers, the stage has 2']),
])
def test_wrong_layer_or_stage_count(make, fragments):
    with raises(ValueError, *fragments):
        make()


@pytest.mark.parametrize('cls,num,unit', [(SoLAVision, 4, 'stages'),
                                          (SwinELFATT, 4, 'stages'),
                                          (CSWin, 4, 'stages'), (InfViT, 2, 'layers')])
def test_out_indices_out_of_range(cls, num, unit):
    with raises(ValueError, f'{cls.__name__}: out_indices (0, {num}) out of range',
                f'it has {num} {unit}', f'0..{num - 1}'):
        tiny(cls, out_indices=(0, num))
    with raises(ValueError, 'out_indices () out of range', 'at least one'):
        tiny(cls, out_indices=())
    assert tiny(cls, out_indices=-1).out_indices == (num - 1, )


@pytest.mark.parametrize('cls', BACKBONES)
@pytest.mark.parametrize('name,value', [('drop_path_rate', 1.5), ('drop_path_rate', 1.),
                                        ('drop_rate', -0.1)])
def test_rates_outside_zero_one(cls, name, value):
    with raises(ValueError, f'{cls.__name__}: {name} must be a probability in [0, 1)',
                f'got {value}'):
        tiny(cls, **{name: value})


def test_attention_dropout_rate():
    with raises(ValueError, 'attn_drop_rate must be a probability'):
        tiny(CSWin, attn_drop_rate=2)


# ----------------------------------------------------------------- images
@pytest.mark.parametrize('cls', BACKBONES)
def test_image_smaller_than_the_backbone_accepts(cls):
    model = tiny(cls).eval()
    m = cls.min_input_size
    with torch.no_grad():
        model(torch.randn(1, 3, m, m + 1))  # the minimum itself runs
        with raises(ValueError, f'{cls.__name__} needs images of at least {m}x{m}',
                    f'got {m - 1}x{m + 1}', 'resize or pad'):
            model(torch.randn(1, 3, m - 1, m + 1))
        with raises(ValueError, 'expects a (B, C, H, W) image batch with C = 3',
                    'got shape (1, 1, 32, 32)'):
            model(torch.randn(1, 1, 32, 32))
        with raises(ValueError, 'got shape (3, 32, 32)'):
            model(torch.randn(3, 32, 32))


def test_init_cfg_missing_file(tmp_path):
    missing = str(tmp_path / 'nope.pth')
    model = tiny(SoLAVision, init_cfg=dict(type='Pretrained', checkpoint=missing))
    with raises(FileNotFoundError, 'SoLAVision init_cfg', f'checkpoint {missing} does '
                'not exist', 'fix the path, or remove init_cfg'):
        model.init_weights()


# ------------------------------------------------------------ tools/train.py
def run_tool(name, monkeypatch, *args):
    """``main()`` of tools/<name>.py with ``args``; returns SystemExit's text."""
    monkeypatch.setattr(sys, 'argv', [f'{name}.py', *map(str, args)])
    with pytest.raises(SystemExit) as exit_info:
        importlib.import_module(f'tools.{name}').main()
    return str(exit_info.value.code)


def _tree(path):
    return {p: p.stat().st_mtime_ns for p in Path(path).rglob('*')}


def test_train_missing_data_root_one_line(monkeypatch, tmp_path):
    work_dir = tmp_path / 'work'
    message = run_tool('train', monkeypatch, SEG_CONFIG, '--work-dir', work_dir,
                       '--cfg-options', f'data_root={tmp_path}/no_ade')
    assert message.startswith('error: dataset not found: ')
    assert f'train_dataloader data_root {tmp_path}/no_ade' in message
    assert 'pass --cfg-options data_root=PATH' in message and '\n' not in message
    assert not work_dir.exists()  # nothing written before the check


def small_config(tmp_path, data_root, **model_extra):
    """An mmseg config with no external bases (quick to parse) on ``data_root``."""
    path = tmp_path / 'small_seg.py'
    path.write_text(f"""
default_scope = 'mmseg'
data_root = {str(data_root)!r}
model = dict(type='EncoderDecoder',
             backbone=dict(type='mmhybrid.SoLAVision', **{model_extra!r}))
dataset = dict(type='ADE20KDataset', data_root=data_root, data_prefix=dict(
    img_path='images/training', seg_map_path='annotations/training'))
train_dataloader = dict(batch_size=1, dataset=dataset)
test_dataloader = dict(batch_size=1, dataset=dataset)
test_evaluator = dict(type='IoUMetric')
""")
    return path


def test_train_missing_image_folder(monkeypatch, tmp_path):
    (tmp_path / 'ade').mkdir()
    config = small_config(tmp_path, tmp_path / 'ade')
    message = run_tool('train', monkeypatch, config, '--work-dir', tmp_path / 'w')
    assert f'train_dataloader data_prefix {tmp_path}/ade/images/training' in message


def test_train_missing_config_suggests_close_names(monkeypatch):
    message = run_tool('train', monkeypatch, ROOT / 'configs/sola/upernet_sola-t_ade.py')
    assert 'config file' in message and 'does not exist' in message
    assert 'did you mean' in message and 'upernet_sola-t_ade20k.py' in message
    message = run_tool('train', monkeypatch, 'no/such/dir/x.py')
    assert 'nor does its directory no/such/dir' in message


def test_train_refuses_a_work_dir_with_another_run(monkeypatch, toy_data, tmp_path):
    work_dir = tmp_path / 'work'
    work_dir.mkdir()
    (work_dir / 'iter_120.pth').write_bytes(b'old run')
    (work_dir / 'last_checkpoint').write_text(str(work_dir / 'iter_120.pth'))
    before = _tree(work_dir)
    config = small_config(tmp_path, toy_data['ade'])
    message = run_tool('train', monkeypatch, config, '--work-dir', work_dir)
    assert message == (f'error: work dir {work_dir} already holds a run (iter_120.pth, '
                       'last_checkpoint); continue it with --resume, or give this run '
                       'another --work-dir (nothing was written)')
    assert _tree(work_dir) == before
    assert (work_dir / 'iter_120.pth').read_bytes() == b'old run'


def test_train_missing_pretrained_checkpoint(monkeypatch, toy_data, tmp_path):
    config = small_config(tmp_path, toy_data['ade'], init_cfg=dict(
        type='Pretrained', checkpoint=f'{tmp_path}/in1k.pth'))
    message = run_tool('train', monkeypatch, config, '--work-dir', tmp_path / 'w')
    assert message.startswith("error: checkpoint not found: model.backbone.init_cfg."
                              f"checkpoint='{tmp_path}/in1k.pth'")
    assert 'fix the path, or remove the entry' in message
    message = run_tool('train', monkeypatch, small_config(tmp_path, toy_data['ade']),
                       '--work-dir', tmp_path / 'w', '--resume', tmp_path / 'iter_9.pth')
    assert message == f'error: --resume {tmp_path}/iter_9.pth: no such checkpoint'
    assert not (tmp_path / 'w').exists()


def test_test_tool_missing_data_and_bad_out(monkeypatch, toy_data, tmp_path):
    ckpt = tmp_path / 'model.pth'
    torch.save({}, ckpt)
    message = run_tool('test', monkeypatch, small_config(tmp_path, tmp_path / 'none'),
                       ckpt, '--work-dir', tmp_path / 'w')
    assert 'test_dataloader data_root' in message
    config = small_config(tmp_path, toy_data['ade'])
    message = run_tool('test', monkeypatch, config, tmp_path / 'no.pth')
    assert message.startswith('error: checkpoint not found: '
                              f"load_from='{tmp_path}/no.pth'")
    config.write_text(config.read_text().replace("'mmseg'", "'mmdet'"))
    message = run_tool('test', monkeypatch, config, ckpt, '--work-dir', tmp_path / 'w',
                       '--out', tmp_path / 'preds.json')
    assert message.endswith('give a path ending in .pkl')
    assert not (tmp_path / 'w').exists()


def test_train_resume_refuses_only_damaged_checkpoints(monkeypatch, toy_data, tmp_path):
    work_dir = tmp_path / 'work'
    work_dir.mkdir()
    (work_dir / 'iter_2.pth').write_bytes(b'PK\x03\x04 cut off mid-save')
    (work_dir / 'last_checkpoint').write_text(str(work_dir / 'iter_2.pth'))
    message = run_tool('train', monkeypatch, small_config(tmp_path, toy_data['ade']),
                       '--work-dir', work_dir, '--resume')
    assert message.startswith(f'error: cannot resume from {work_dir}: ')
    assert 'no intact checkpoint is there' in message and 'pass --resume' in message
