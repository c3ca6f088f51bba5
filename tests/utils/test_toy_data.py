"""The toy sets load through the real dataset classes and training pipelines."""
import numpy as np
import pytest
from mmengine.registry import init_default_scope

from mmhybrid.utils import register_scope
from tools.toy_data import ADE_NAMES, COCO_NAMES, draw_scene, make_toy_ade20k


def test_scene_is_deterministic():
    a = draw_scene(64, 80, np.random.default_rng(3))
    b = draw_scene(64, 80, np.random.default_rng(3))
    np.testing.assert_array_equal(a[0], b[0])
    assert [o[0] for o in a[2]] == [o[0] for o in b[2]]
    masks = sum(o[2].astype(int) for o in a[2])
    assert masks.max() == 1  # shapes never overlap


def test_toy_ade20k_same_files_every_time(tmp_path, toy_data):
    again = make_toy_ade20k(str(tmp_path), 4, 2, size=(96, 128))
    for rel in ('images/training/ADE_train_00000001.jpg',
                'annotations/validation/ADE_valid_00000002.png'):
        assert (tmp_path / rel).read_bytes() == open(
            f'{toy_data["ade"]}/{rel}', 'rb').read()
    assert again == str(tmp_path)


def test_ade20k_dataset_and_pipeline(toy_data):
    register_scope('mmseg')
    init_default_scope('mmseg')
    from mmseg.datasets import ADE20KDataset
    classes = ADE20KDataset.METAINFO['classes']
    pipeline = [
        dict(type='LoadImageFromFile'),
        dict(type='LoadAnnotations', reduce_zero_label=True),
        dict(type='RandomResize', scale=(256, 64), ratio_range=(1.0, 2.0),
             keep_ratio=True),
        dict(type='RandomCrop', crop_size=(64, 64), cat_max_ratio=0.75),
        dict(type='RandomFlip', prob=0.5),
        dict(type='PhotoMetricDistortion'),
        dict(type='PackSegInputs'),
    ]
    ds = ADE20KDataset(data_root=toy_data['ade'], pipeline=pipeline,
                       data_prefix=dict(img_path='images/training',
                                        seg_map_path='annotations/training'))
    assert len(ds) == 4
    item = ds[0]
    assert tuple(item['inputs'].shape) == (3, 64, 64)
    raw = ADE20KDataset(data_root=toy_data['ade'], pipeline=[
        dict(type='LoadAnnotations', reduce_zero_label=True)],
        data_prefix=dict(img_path='images/validation',
                         seg_map_path='annotations/validation'))
    labels = set()
    for i in range(len(raw)):
        labels |= set(np.unique(raw[i]['gt_seg_map']).tolist())
    names = {classes[i] for i in labels}
    assert names >= set(ADE_NAMES['background'])
    assert names - set(ADE_NAMES['background']) <= set(ADE_NAMES['shapes'])
    assert 255 not in labels  # every pixel is labelled


def test_coco_dataset_and_pipeline(toy_data):
    register_scope('mmdet')
    init_default_scope('mmdet')
    from mmdet.datasets import CocoDataset
    pipeline = [
        dict(type='LoadImageFromFile'),
        dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
        dict(type='Resize', scale=(213, 128), keep_ratio=True),
        dict(type='RandomFlip', prob=0.5),
        dict(type='PackDetInputs'),
    ]
    ds = CocoDataset(data_root=toy_data['coco'],
                     ann_file='annotations/instances_train2017.json',
                     data_prefix=dict(img='train2017/'), pipeline=pipeline)
    assert len(ds) == 4
    sample = ds[0]['data_samples']
    inst = sample.gt_instances
    assert len(inst) >= 1
    classes = CocoDataset.METAINFO['classes']
    assert {classes[i] for i in inst.labels.tolist()} <= set(COCO_NAMES)
    # polygon masks agree with their boxes
    masks = inst.masks.to_ndarray()
    for box, mask in zip(inst.bboxes.tensor.numpy(), masks):
        ys, xs = np.nonzero(mask)
        assert abs(xs.min() - box[0]) <= 2 and abs(ys.min() - box[1]) <= 2


@pytest.mark.parametrize('split,num', [('train', 8), ('val', 4)])
def test_imagenet_dataset_and_pipeline(toy_data, split, num):
    register_scope('mmpretrain')
    init_default_scope('mmpretrain')
    from mmpretrain.datasets import ImageNet
    pipeline = [
        dict(type='LoadImageFromFile'),
        dict(type='RandomResizedCrop', scale=48, backend='pillow',
             interpolation='bicubic'),
        dict(type='PackInputs'),
    ]
    ds = ImageNet(data_root=toy_data['imagenet'], split=split,
                  pipeline=pipeline)
    assert len(ds) == num
    assert sorted({c for i in range(num) for c in ds.get_cat_ids(i)}) == [0, 1, 2, 3]
    assert tuple(ds[0]['inputs'].shape) == (3, 48, 48)
