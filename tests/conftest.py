import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason='needs CUDA')
    for item in items:
        if 'cuda' in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope='session')
def toy_data(tmp_path_factory):
    """Tiny toy ADE20K / COCO / ImageNet sets (real layouts), made once per run."""
    from tools.toy_data import make_toy_ade20k, make_toy_coco, make_toy_imagenet
    root = tmp_path_factory.mktemp('toy_data')
    return dict(
        ade=make_toy_ade20k(str(root / 'ade'), 4, 2, size=(96, 128)),
        coco=make_toy_coco(str(root / 'coco'), 4, 2, size=(128, 160)),
        imagenet=make_toy_imagenet(str(root / 'imagenet'), 2, 1, size=64))
