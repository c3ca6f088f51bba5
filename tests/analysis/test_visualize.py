"""tools/analysis/visualize_features.py on tiny inputs: PNGs and ERF arrays."""
from pathlib import Path

import cv2
import numpy as np
import torch

from tools.analysis import visualize_features

ROOT = Path(__file__).resolve().parents[2]


def _check_outputs(out, num_outputs, size):
    for name in ('features.png', 'erf.png'):
        image = cv2.imread(str(out / name))
        assert image is not None and image.ndim == 3 and min(image.shape[:2]) > 100
    erfs = np.load(out / 'erf.npy')
    assert erfs.shape == (num_outputs, *size) and (erfs >= 0).all()
    return erfs


def test_registered_backbone_generated_images(tmp_path):
    out = tmp_path / 'sola'
    erfs = visualize_features.main(['--backbone', 'SoLAVision', '--arch', 't',
                                    '--size', '48', '40', '--num-images', '2',
                                    '--out', str(out)])
    saved = _check_outputs(out, 4, (48, 40))
    np.testing.assert_allclose(saved, np.stack(erfs))
    # stage 1 sees its own 4x4 patch most: the ERF peaks in the centre patch
    peak = np.unravel_index(saved[0].argmax(), saved[0].shape)
    assert 20 <= peak[0] < 28 and 16 <= peak[1] < 24
    # deeper outputs spread their receptive field further from the centre
    spread = [(e > 0.01 * e.max()).mean() for e in saved]
    assert spread[3] > spread[0]


def test_config_backbone_with_checkpoint_and_image(tmp_path, toy_data):
    config = ROOT / 'configs/sola/upernet_sola-t_ade20k.py'
    model, mean, _ = visualize_features.build_backbone(str(config))
    assert mean == (123.675, 116.28, 103.53)  # the config's data preprocessor
    for p in model.parameters():
        p.data.normal_(0, 0.05)
    ckpt = tmp_path / 'backbone.pth'
    torch.save(model.state_dict(), ckpt)
    image = next(Path(toy_data['ade'], 'images/validation').glob('*.jpg'))
    out = tmp_path / 'from_config'
    visualize_features.main([str(config), '--checkpoint', str(ckpt), '--image', str(image),
                            '--size', '32', '--out', str(out), '--options', 'out_indices=1,3'])
    _check_outputs(out, 2, (32, 32))
    loaded, _, _ = visualize_features.build_backbone(str(config), checkpoint=str(ckpt))
    torch.testing.assert_close(loaded.pos_embed, model.pos_embed)
