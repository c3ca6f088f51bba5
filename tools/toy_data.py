"""Small deterministic datasets in the real ADE20K, COCO and ImageNet layouts.

Every image shows a wall/floor background and a few textured shapes (disc,
square, triangle, ellipse). Each shape kind has its own colour and texture, so
a model learns the task within minutes on a CPU. The files are read by the real
``ADE20KDataset`` (mmseg), ``CocoDataset`` (mmdet) and ``ImageNet`` (mmpretrain)
classes: labels are indices of those datasets' own class lists.

Layouts: ade ``images|annotations/{training,validation}/*.{jpg,png}`` (PNG:
ADE class index + 1); coco ``{train,val}2017/*.jpg`` and
``annotations/instances_{train,val}2017.json``; imagenet ``train/<wnid>/*.JPEG``,
``val/*.JPEG``, ``meta/{train,val}.txt``.
"""
import json
import os
import os.path as osp

import cv2
import numpy as np

SHAPES = ('disc', 'square', 'triangle', 'ellipse')
# class names each shape takes in the real datasets' class lists
ADE_NAMES = {'background': ('wall', 'floor'),
             'shapes': ('ball', 'box', 'flag', 'plate')}
COCO_NAMES = ('sports ball', 'book', 'kite', 'frisbee')
# the first four ImageNet-1K classes (label index = position)
IMAGENET_WNIDS = ('n01440764', 'n01443537', 'n01484850', 'n01491361')
# COCO 2017 category ids of the 80 classes, in mmdet's class order: 1-90 less the
# ten ids no released COCO annotation uses
COCO_CATEGORY_IDS = tuple(i for i in range(1, 91)
                          if i not in (12, 26, 29, 30, 45, 66, 68, 69, 71, 83))

_SHAPE_COLOURS = ((60, 60, 210), (70, 180, 70), (200, 90, 40), (40, 200, 220))


def _texture(kind, h, w, rng):
    """A BGR texture for shape ``kind``: stripes, checks, diagonals or speckle."""
    yy, xx = np.mgrid[:h, :w]
    pattern = (
        (yy // 3) % 2,
        ((yy // 5) + (xx // 5)) % 2,
        ((xx + yy) // 4) % 2,
        rng.random((h, w)) > 0.5,
    )[kind].astype(np.float32)
    colour = np.array(_SHAPE_COLOURS[kind], np.float32) + rng.uniform(-25, 25, 3)
    img = colour * (0.75 + 0.25 * pattern[..., None])
    return np.clip(img + rng.normal(0, 6, (h, w, 3)), 0, 255).astype(np.uint8)


def _background(h, w, rng):
    """Smooth wall above a horizon, boarded floor below; returns (img, horizon)."""
    horizon = int(h * rng.uniform(0.55, 0.8))
    yy, xx = np.mgrid[:h, :w]
    wall = np.array((170, 175, 180), np.float32) + rng.uniform(-20, 20, 3)
    img = wall * (0.9 + 0.1 * yy[..., None] / h)
    floor = np.array((60, 95, 130), np.float32) + rng.uniform(-15, 15, 3)
    boards = 0.8 + 0.2 * ((xx // 12) % 2)[..., None]
    img[horizon:] = (floor * boards)[horizon:]
    img = np.clip(img + rng.normal(0, 4, (h, w, 3)), 0, 255).astype(np.uint8)
    return img, horizon


def _polygon(kind, cx, cy, r, angle):
    """Vertices (K, 2) of shape ``kind`` centred at (cx, cy) with radius r."""
    if kind == 1:
        pts = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]]) * 0.75
    else:  # disc, triangle, ellipse
        t = (np.array([0, 2, 4]) * np.pi / 3 - np.pi / 2 if kind == 2
             else np.linspace(0, 2 * np.pi, 32, endpoint=False))
        pts = np.stack([np.cos(t), (0.55 if kind == 3 else 1) * np.sin(t)], 1)
    rot = np.array([[np.cos(angle), -np.sin(angle)],
                    [np.sin(angle), np.cos(angle)]])
    return pts @ rot.T * r + np.array([cx, cy])


def paint_shape(img, kind, cx, cy, r, angle, rng):
    """Paint shape ``kind`` with its texture into ``img``; (polygon, mask)."""
    h, w = img.shape[:2]
    poly = _polygon(kind, cx, cy, r, angle)
    mask = np.zeros((h, w), np.uint8)
    cv2.fillPoly(mask, [np.round(poly).astype(np.int32)], 1)
    inside = mask.astype(bool)
    img[inside] = _texture(kind, h, w, rng)[inside]
    return poly, mask


def draw_scene(h, w, rng, max_objects=3):
    """Render one image; returns (BGR image, horizon, objects).

    ``objects`` is a list of ``(kind, polygon, mask)``; shapes do not overlap.
    """
    img, horizon = _background(h, w, rng)
    objects, placed = [], []
    for _ in range(int(rng.integers(1, max_objects + 1))):
        for _attempt in range(20):
            r = rng.uniform(0.12, 0.24) * min(h, w)
            cx, cy = rng.uniform(r + 1, w - r - 1), rng.uniform(r + 1, h - r - 1)
            if all(np.hypot(cx - x, cy - y) > r + q + 2 for x, y, q in placed):
                break
        else:
            continue
        placed.append((cx, cy, r))
        kind = int(rng.integers(len(SHAPES)))
        poly, mask = paint_shape(img, kind, cx, cy, r, rng.uniform(0, np.pi), rng)
        objects.append((kind, poly, mask))
    return img, horizon, objects


def _size(size, rng):
    """(h, w) around ``size`` with some aspect variety, like real photos."""
    h, w = size
    scale = rng.uniform(0.85, 1.15)
    return int(h * scale) // 2 * 2, int(w * scale * rng.uniform(0.9, 1.2)) // 2 * 2


def make_toy_ade20k(root, num_train=48, num_val=12, size=(128, 160), seed=0):
    """Write a toy ADE20K (``ADEChallengeData2016`` layout) and return ``root``."""
    from mmseg.datasets import ADE20KDataset
    classes = ADE20KDataset.METAINFO['classes']
    wall, floor = (classes.index(n) for n in ADE_NAMES['background'])
    shape_ids = [classes.index(n) for n in ADE_NAMES['shapes']]
    rng = np.random.default_rng(seed)
    for split, num in (('training', num_train), ('validation', num_val)):
        os.makedirs(osp.join(root, 'images', split), exist_ok=True)
        os.makedirs(osp.join(root, 'annotations', split), exist_ok=True)
        for i in range(num):
            h, w = _size(size, rng)
            img, horizon, objects = draw_scene(h, w, rng)
            label = np.full((h, w), wall + 1, np.uint8)  # PNG holds index + 1
            label[horizon:] = floor + 1
            for kind, _, mask in objects:
                label[mask.astype(bool)] = shape_ids[kind] + 1
            name = f'ADE_{split[:5]}_{i + 1:08d}'
            cv2.imwrite(osp.join(root, 'images', split, name + '.jpg'), img)
            cv2.imwrite(osp.join(root, 'annotations', split, name + '.png'), label)
    return root


def make_toy_coco(root, num_train=48, num_val=12, size=(160, 192), seed=1):
    """Write a toy COCO 2017 instance set (boxes + polygons) and return ``root``."""
    from mmdet.datasets import CocoDataset
    classes = CocoDataset.METAINFO['classes']
    categories = [dict(id=cid, name=name, supercategory='object')
                  for cid, name in zip(COCO_CATEGORY_IDS, classes)]
    shape_cat = [COCO_CATEGORY_IDS[classes.index(n)] for n in COCO_NAMES]
    rng = np.random.default_rng(seed)
    os.makedirs(osp.join(root, 'annotations'), exist_ok=True)
    ann_id = 1
    for split, num in (('train2017', num_train), ('val2017', num_val)):
        os.makedirs(osp.join(root, split), exist_ok=True)
        images, annotations = [], []
        for i in range(num):
            h, w = _size(size, rng)
            img, _, objects = draw_scene(h, w, rng)
            img_id = (1 if split == 'train2017' else 500000) + i
            file_name = f'{img_id:012d}.jpg'
            cv2.imwrite(osp.join(root, split, file_name), img)
            images.append(dict(id=img_id, file_name=file_name, width=w, height=h))
            for kind, poly, mask in objects:
                annotations.append(dict(
                    id=ann_id, image_id=img_id, category_id=shape_cat[kind],
                    segmentation=[np.round(poly, 1).ravel().tolist()],
                    area=float(mask.sum()), iscrowd=0,
                    bbox=list(cv2.boundingRect(mask))))
                ann_id += 1
        with open(osp.join(root, 'annotations', f'instances_{split}.json'), 'w') as f:
            json.dump(dict(images=images, annotations=annotations,
                           categories=categories), f)
    return root


def make_toy_imagenet(root, num_train=8, num_val=2, size=64, seed=2):
    """Write a toy ImageNet-1K (4 classes, ``num_*`` images per class)."""
    rng = np.random.default_rng(seed)
    os.makedirs(osp.join(root, 'meta'), exist_ok=True)
    os.makedirs(osp.join(root, 'val'), exist_ok=True)
    train_lines, val_lines = [], []
    for label, wnid in enumerate(IMAGENET_WNIDS):
        os.makedirs(osp.join(root, 'train', wnid), exist_ok=True)
        for i in range(num_train + num_val):
            img, _ = _background(size, size, rng)
            paint_shape(img, label, size / 2, size / 2,
                        rng.uniform(0.25, 0.4) * size, rng.uniform(0, np.pi), rng)
            if i < num_train:
                rel = f'{wnid}/{wnid}_{i}.JPEG'
                cv2.imwrite(osp.join(root, 'train', rel), img)
                train_lines.append(f'{rel} {label}')
            else:
                rel = f'ILSVRC2012_val_{len(val_lines) + 1:08d}.JPEG'
                cv2.imwrite(osp.join(root, 'val', rel), img)
                val_lines.append(f'{rel} {label}')
    for split, lines in (('train', train_lines), ('val', val_lines)):
        with open(osp.join(root, 'meta', f'{split}.txt'), 'w') as f:
            f.write('\n'.join(lines) + '\n')
    return root
