"""Checkpoint files: weights-only round trip, corrupt / untrusted files, and the
one-line load summary with its refusal of checkpoints of another arch."""
import logging
import os
import pickle

import numpy as np
import pytest
import torch
from mmengine.logging import HistoryBuffer, MMLogger
from mmengine.runner import load_checkpoint
from mmengine.runner.checkpoint import CheckpointLoader

from mmhybrid.models.backbones import SoLAVision, SwinELFATT
from mmhybrid.models.utils import load_pretrained
from mmhybrid.utils import CheckpointError, resave_weights_only
from mmhybrid.utils import checkpoint as ckpt
from mmhybrid.utils.checkpoint import from_weights_only, to_weights_only

# like SoLA-T and SoLA-S: one schedule, equal stage-1 width, wider later stages
ARCH_T = dict(embed_dims=(16, 24, 32, 40), schedule='LL/L/LS/S', hsb_routes=())
ARCH_S = dict(embed_dims=(16, 32, 48, 64), schedule='LL/L/LS/S', hsb_routes=())


def sola(arch=ARCH_T, **kwargs):
    return SoLAVision(arch=arch, head_dim=16, **kwargs)


def load(path, trusted=False):
    return ckpt.load_local_checkpoint(str(path), map_location='cpu', trusted=trusted)


class RunsCode:
    """Unpickling this creates a directory: stands for a malicious checkpoint."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return os.makedirs, (self.path, )


# ---------------------------------------------------------- weights-only form
def test_weights_only_round_trip(tmp_path):
    buffer = HistoryBuffer([0.5, 0.25], [1, 2], max_length=7)
    checkpoint = {
        'state_dict': {'w': torch.randn(2)},
        'message_hub': {'log_scalars': {'train/loss': buffer},
                        'runtime_info': {'lr': np.float32(0.1), 'iters': np.arange(3),
                                         'names': np.array(['a', 'bc'])}},
        'meta': {'dataset_meta': {'classes': ('a', 'b'), 'palette': [[1, 2, 3]]}},
    }
    path = tmp_path / 'ckpt.pth'
    torch.save(to_weights_only(checkpoint), path)  # what AtomicCheckpointHook saves
    raw = torch.load(path, weights_only=True)  # no allow-list, no mmhybrid
    assert torch.equal(raw['state_dict']['w'], checkpoint['state_dict']['w'])
    back = load(path)
    loaded = back['message_hub']['log_scalars']['train/loss']
    assert isinstance(loaded, HistoryBuffer) and loaded.max_length == 7
    np.testing.assert_array_equal(loaded.data[0], buffer.data[0])
    assert loaded.data[1].dtype == buffer.data[1].dtype
    info = back['message_hub']['runtime_info']
    assert type(info['lr']) is np.float32 and info['lr'] == np.float32(0.1)
    assert info['iters'].dtype == np.arange(3).dtype
    assert info['names'].tolist() == ['a', 'bc']
    assert back['meta'] == checkpoint['meta']
    assert from_weights_only(to_weights_only(checkpoint['meta'])) == checkpoint['meta']


def test_state_dict_metadata_and_unchanged_objects_are_kept(tmp_path):
    model = torch.nn.Sequential(torch.nn.BatchNorm1d(2))
    state = model.state_dict()
    meta = {'dataset_meta': {'classes': ('a', 'b')}}
    checkpoint = {'state_dict': state, 'meta': meta, 'hub': np.ones(2)}
    plain = to_weights_only(checkpoint)
    assert plain['state_dict'] is state and plain['meta'] is meta  # nothing copied
    assert isinstance(checkpoint['hub'], np.ndarray)  # the caller's dict untouched
    torch.save(plain, tmp_path / 'x.pth')
    back = from_weights_only(torch.load(tmp_path / 'x.pth', weights_only=True))
    assert back['state_dict']._metadata == state._metadata  # BatchNorm's version


def test_old_full_pickle_needs_trust_and_can_be_resaved(tmp_path):
    path = tmp_path / 'old.pth'
    torch.save({'state_dict': {'w': torch.ones(1)}, 'hub': HistoryBuffer([1.], [1]),
                'n': np.ones(2)}, path)
    with pytest.raises(CheckpointError, match='not unpickled') as err:
        load(path)
    message = str(err.value)
    assert 'mmengine.logging.history_buffer.HistoryBuffer' in message
    assert f'name it trusted://{path}' in message and 'resave_weights_only' in message
    assert isinstance(load(path, trusted=True)['hub'], HistoryBuffer)
    resave_weights_only(str(path))
    assert isinstance(torch.load(path, weights_only=True)['hub'], dict)
    assert isinstance(load(path)['hub'], HistoryBuffer)
    assert sorted(p.name for p in tmp_path.iterdir()) == ['old.pth']  # no temp file


def test_trusted_scheme_of_the_tools(tmp_path):
    """``trusted_path`` (tools/train.py --resume, tools/test.py) goes through
    mmengine's CheckpointLoader, which the Runner calls."""
    path = tmp_path / 'old.pth'
    torch.save({'hub': HistoryBuffer([1.], [1])}, path)
    loaded = CheckpointLoader.load_checkpoint(ckpt.trusted_path(str(path)))
    assert isinstance(loaded['hub'], HistoryBuffer)
    with pytest.raises(pickle.UnpicklingError):  # a plain path: torch's default
        CheckpointLoader.load_checkpoint(str(path))


def test_checkpoint_that_runs_code_is_refused(tmp_path):
    victim = tmp_path / 'created_by_unpickling'
    path = tmp_path / 'evil.pth'
    torch.save({'state_dict': {}, 'payload': RunsCode(str(victim))}, path)
    with pytest.raises(CheckpointError, match='os.makedirs|posix.makedirs'):
        load(path)
    with pytest.raises(CheckpointError, match='not unpickled'):
        ckpt.load_checkpoint(str(path))  # init_cfg Pretrained
    model = torch.nn.Linear(1, 1)
    with pytest.raises(pickle.UnpicklingError, match='Weights only load failed'):
        load_checkpoint(model, str(path))  # what mmseg/mmdet's init_model call
    assert not victim.exists()


@pytest.fixture
def served(tmp_path, monkeypatch):
    """A local HTTP server of ``tmp_path/www`` and an empty torch.hub cache:
    ``served(name)`` is the file's URL."""
    import functools
    import http.server
    import threading
    www = tmp_path / 'www'
    www.mkdir()
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch_home'))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(www))
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield lambda name: f'http://127.0.0.1:{server.server_port}/{name}'
    server.shutdown()
    server.server_close()


def test_download_is_loaded_weights_only(tmp_path, served):
    """mmengine's http loader (torch.hub, ``weights_only=False``) would run the
    file's code; ours reads downloads weights-only, as init_cfg Pretrained does."""
    victim = tmp_path / 'created_by_unpickling'
    torch.save({'state_dict': {}, 'payload': RunsCode(str(victim))},
               tmp_path / 'www' / 'evil.pth')
    torch.save({'state_dict': {'w': torch.ones(2)}}, tmp_path / 'www' / 'good.pth')
    with pytest.raises(CheckpointError, match='os.makedirs|posix.makedirs'):
        ckpt.load_checkpoint(served('evil.pth'))
    with pytest.raises(CheckpointError, match='download is always loaded weights-only'):
        ckpt.load_checkpoint('trusted://' + served('evil.pth'))
    assert not victim.exists()
    loaded = ckpt.load_checkpoint(served('good.pth'))
    assert torch.equal(loaded['state_dict']['w'], torch.ones(2))
    cached = tmp_path / 'torch_home' / 'hub' / 'checkpoints' / 'good.pth'
    assert cached.is_file()  # where torch.hub and mmengine cache it


def test_one_trusted_spelling_everywhere(tmp_path):
    """``trusted://PATH`` is registered when mmhybrid is imported: mmengine's
    loaders (the Runner, init_model), our loader and trusted_path agree."""
    path = tmp_path / 'own.pth'
    torch.save({'state_dict': {'w': torch.ones(1)}, 'hub': HistoryBuffer([1.], [1])},
               path)
    name = f'trusted://{path}'
    assert ckpt.trusted_path(name) == name == ckpt.trusted_path(str(path))
    model = torch.nn.Module()
    model.w = torch.nn.Parameter(torch.zeros(1))
    load_checkpoint(model, name)  # mmengine's, as init_model calls it
    assert model.w.item() == 1
    assert isinstance(ckpt.load_checkpoint(name)['hub'], HistoryBuffer)
    model.w.data.zero_()
    ckpt.load_model_checkpoint(model, name)
    assert model.w.item() == 1
    with pytest.raises(CheckpointError, match=f'name it trusted://{path}'):
        ckpt.load_model_checkpoint(model, str(path))


# --------------------------------------------------------------- bad files
def _bad_files(tmp_path):
    good = tmp_path / 'good.pth'
    torch.save({'w': torch.randn(64)}, good)
    data = good.read_bytes()
    files = {
        'empty': (b'', 'is empty (0 bytes)'),
        'random': (np.random.default_rng(0).bytes(256),
                   'is not a torch checkpoint or is corrupt'),
        'truncated': (data[:len(data) // 2], 'is truncated or corrupt'),
        'html': (b'<!DOCTYPE html><html>404</html>', 'is not a checkpoint but text/HTML'),
    }
    try:
        from safetensors.torch import save
        files['safetensors'] = (save({'w': torch.randn(4)}), 'is a safetensors file')
    except ImportError:
        pass
    for name, (content, _) in files.items():
        (tmp_path / f'{name}.pth').write_bytes(content)
    return {tmp_path / f'{name}.pth': message for name, (_, message) in files.items()}


@pytest.mark.parametrize('trusted', [False, True])
def test_corrupt_files_are_not_mistaken_for_untrusted_ones(tmp_path, trusted):
    for path, message in _bad_files(tmp_path).items():
        with pytest.raises(CheckpointError) as err:
            load(path, trusted)
        text = str(err.value)
        assert f'checkpoint {path} {message}' in text, text
        assert 'save or download it again' in text
        assert 'not unpickled' not in text


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match='does not exist'):
        load(tmp_path / 'missing.pth')


# ------------------------------------------------------------ load summary
def _save(model, path):
    torch.save({'state_dict': {f'backbone.{k}': v for k, v in
                               model.state_dict().items()}}, path)
    return str(path)



class Records(logging.Handler):
    """The lines our loader logs (mmengine's own 'Loads checkpoint by ...' aside)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.records = []

    def emit(self, record):
        if not record.getMessage().startswith('Loads checkpoint'):
            self.records.append(record)


@pytest.fixture
def caplog_mm():
    logger = MMLogger.get_current_instance()
    handler = Records()
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


def test_other_arch_is_refused_with_one_summary(tmp_path, caplog_mm):
    path = _save(sola(ARCH_S), tmp_path / 's.pth')
    model = sola(init_cfg=dict(type='Pretrained', checkpoint=path))
    total = len(model.state_dict())
    with pytest.raises(ValueError) as err:
        model.init_weights()
    text = str(err.value)
    matched = int(text.split('loaded ')[1].split('/')[0])
    assert matched < total / 2 and f'/{total} tensors from {path}' in text
    assert 'shape-mismatched (checkpoint vs model)' in text
    assert 'another arch' in text and 'strict=False' in text
    assert not caplog_mm.records  # no per-key warnings before the error

    # asked for: a partial load with one warning line
    model = sola(init_cfg=dict(type='Pretrained', checkpoint=path, strict=False))
    model.init_weights()
    lines = [r.getMessage() for r in caplog_mm.records]
    assert len(lines) == 1 and lines[0].startswith(f'SoLAVision: loaded {matched}/')
    assert caplog_mm.records[0].levelno == logging.WARNING
    src = torch.load(path)['state_dict']
    torch.testing.assert_close(model.patch_embed.projection.weight,
                               src['backbone.patch_embed.projection.weight'])


def test_other_model_loads_nothing(tmp_path):
    path = _save(sola(), tmp_path / 'sola.pth')
    swin = SwinELFATT(arch=dict(embed_dims=16, depths=(1, 1, 1, 1),
                                num_heads=(1, 1, 2, 2)), block_sizes=(8, 8, 8, 8))
    with pytest.raises(ValueError, match='another arch or model') as err:
        load_pretrained(swin, path)
    text = str(err.value)
    counts = text.split('SwinELFATT: loaded ')[1].split(' ')[0]
    loaded, total = map(int, counts.split('/'))
    assert loaded < total / 2 and total == len(swin.state_dict())  # stem and norms only


def test_exact_and_strict(tmp_path, caplog_mm):
    src = sola()
    path = _save(src, tmp_path / 't.pth')
    missing, unexpected = load_pretrained(sola(), path, strict=True)
    assert missing == unexpected == []
    record, = caplog_mm.records
    total = len(src.state_dict())
    assert record.levelno == logging.INFO and record.getMessage() == (
        f'SoLAVision: loaded {total}/{total} tensors from {path}; missing 0; '
        'unexpected 0; shape-mismatched (checkpoint vs model) 0')
    state = torch.load(path)['state_dict']
    del state['backbone.norm3.weight']
    torch.save({'state_dict': state}, path)
    with pytest.raises(ValueError, match=r'missing 1 \(norm3.weight\).*strict=True '
                                         'needs an exact match'):
        load_pretrained(sola(), path, strict=True)
    load_pretrained(sola(), path)  # default: most of it matches


def test_full_pickle_for_pretrained_is_refused_not_misreported(tmp_path):
    path = tmp_path / 'full.pth'
    torch.save({'state_dict': sola().state_dict(), 'meta': {'x': np.ones(1)}}, path)
    with pytest.raises(CheckpointError, match='numpy'):
        load_pretrained(sola(), str(path))


def test_pickle_module_error_is_a_checkpoint_error(tmp_path):
    path = tmp_path / 'pickled.pkl'
    path.write_bytes(pickle.dumps({'a': 1}))
    with pytest.raises(CheckpointError, match='not a torch checkpoint'):
        load(path)
