"""README's "Using a backbone in your own config", run as written: its code blocks
in order, a block starting ``# NAME.py`` written to that file, the others run;
each config they make is built through mmseg's registry and run, its widths
checked. The output-channel table of docs/configs.md against the built backbones. A neck
width that does not fit is refused before a Runner is built, naming both."""
import re
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.model import revert_sync_batchnorm
from mmengine.registry import init_default_scope

from mmhybrid.registry import build_model
from mmhybrid.utils import check_backbone_widths

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / 'README.md'
CHANNELS = ROOT / 'docs' / 'configs.md'
SECTION = '## Using a backbone in your own config'


def section(path=README, heading=SECTION):
    text = path.read_text()
    start = text.index(heading)
    return text[start:text.index('\n## ', start + len(heading))]


def code_blocks():
    return re.findall(r'```python\n(.*?)```', section(), re.S)


def arch_table():
    """{(class, arch): channels} of docs/configs.md's table."""
    table = {}
    for line in section(CHANNELS, '## Output channels of each arch').splitlines():
        cells = [c.strip() for c in line.strip('|').split('|')]
        for arch_cell, channels in zip(cells[::2], cells[1::2]):
            names = re.findall(r'`([^`]+)`', arch_cell)
            if names and re.fullmatch(r'[\d, ]+', channels):
                for arch in names[1:]:
                    table[names[0], arch] = tuple(int(c) for c in channels.split(','))
    return table


def build_and_run(path):
    from mmseg.registry import MODELS
    cfg = Config.fromfile(path)
    check_backbone_widths(cfg)
    init_default_scope(cfg.default_scope)
    model = revert_sync_batchnorm(MODELS.build(cfg.model)).eval()
    with torch.no_grad():
        logits = model._forward(torch.randn(1, 3, 64, 64))
    assert logits.shape == (1, cfg.model.decode_head.num_classes, 16, 16)
    return cfg


def test_readme_own_config_snippets_run(tmp_path, monkeypatch):
    """The swap_backbone block dumps my_upernet_sola-t.py, the ``_delete_=True``
    block writes it by hand: each is built and run as it is made."""
    monkeypatch.chdir(tmp_path)
    target = tmp_path / 'my_upernet_sola-t.py'
    built = []
    for block in code_blocks():
        name = re.match(r'# (\S+\.py)\n', block)
        if name:
            (tmp_path / name.group(1)).write_text(block)
        else:
            exec(compile(block, str(README), 'exec'), {})
        if target.exists():
            cfg = build_and_run(str(target))
            assert cfg.model.backbone.type == 'mmhybrid.SoLAVision'
            assert cfg.default_hooks.checkpoint.type == 'mmhybrid.AtomicCheckpointHook'
            built.append('_delete_' in target.read_text())
            target.unlink()
    assert built == [False, True]  # swap_backbone's dump, then the hand-written one


SMALL = {('SoLAVision', 't'), ('CSWin', 't'), ('SwinELFATT', 't'), ('HAViT', 'deit-t'),
         ('InfiniteVLVision', 't')}


def test_arch_table_lists_every_arch():
    from mmhybrid import list_archs
    assert sorted(f'{cls}/{arch}' for cls, arch in arch_table()) == list_archs()


@pytest.mark.parametrize('cls,arch', [
    pytest.param(*key, marks=[] if key in SMALL else [pytest.mark.slow])
    for key in sorted(arch_table())])
def test_arch_table_channels(cls, arch):
    model = build_model(dict(type=cls, arch=arch))
    channels = tuple(getattr(model, f'norm{i}').normalized_shape[0]
                     for i in model.out_indices)
    assert channels == arch_table()[cls, arch]


def test_width_mismatch_is_named_before_a_runner(tmp_path):
    """Swin-T's widths left in the heads: refused with both widths, by the check
    tools/train.py and tools/test.py run before building the runner."""
    from tools._common import ConfigError, check_widths
    (tmp_path / 'wrong.py').write_text(
        "_base_ = ['mmseg::_base_/models/upernet_swin.py']\n"
        "model = dict(backbone=dict(_delete_=True, type='mmhybrid.SoLAVision', "
        "arch='t'), decode_head=dict(in_channels=[96, 192, 384, 768]))\n")
    cfg = Config.fromfile(str(tmp_path / 'wrong.py'))
    with pytest.raises(ConfigError) as err:
        check_widths(cfg)
    assert str(err.value).startswith(
        'model.decode_head.in_channels=[96, 192, 384, 768], but the backbone '
        'mmhybrid.SoLAVision returns [96, 128, 192, 256] channels there')
    assert 'set model.decode_head.in_channels=[96, 128, 192, 256]' in str(err.value)
    cfg.model.decode_head.in_channels = [96, 128, 192, 256]
    with pytest.raises(ConfigError, match=r'auxiliary_head.in_channels=384, but .* '
                       r'returns 192 channels there'):
        check_widths(cfg)
    cfg.model.auxiliary_head.in_channels = 192
    check_widths(cfg)
