"""Parameters and FLOPs of the model a config builds, per backbone stage and part.

    python tools/analysis/get_flops.py configs/sola/upernet_sola-t_ade20k.py --shape 512
    python tools/analysis/get_flops.py configs/sola/sola-t_in1k.py --backbone-only
    python tools/analysis/get_flops.py --arch SoLAVision t s b     # bare backbones, 224^2
    python tools/analysis/get_flops.py --arch HAViT paper --shape 32 \
        --cfg-options patch_size=4 img_size=32                     # backbone arguments
    python tools/analysis/get_flops.py --paper-tables [sola elfatt infvit]
    python tools/analysis/get_flops.py --arch-tables [SoLAVision HAViT ...]

FLOPs are multiply-adds as fvcore / mmengine's ``get_flops`` count them, plus
scaled-dot-product attention and the ``macs`` formulas of custom ops
(``tools/analysis/flops``), on one random image. Whole models run in upstream's
``mode='tensor'``, as mmseg/mmdet/mmpretrain's own get_flops do.
``--paper-tables`` / ``--arch-tables`` print the tables of docs/benchmarks.md
from ``configs/<family>/metafile.yml`` (``Paper Figures`` and ``Backbone`` entries).
"""
import argparse
import glob
import logging
import os.path as osp

import mmengine
import torch
from mmengine.config import DictAction
from mmengine.logging import MMLogger

from tools.analysis.flops import Complexity
from tools.deploy.exportable import build  # the tools' one model builder

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
PLAIN_KINDS = {'matmul', 'conv', 'norm', 'resample'}


def read_metafiles(configs=osp.join(REPO, 'configs')):
    """``(papers, paper_rows, arch_rows)`` of every ``configs/<family>/metafile.yml``:
    {family: paper name}, the models with ``Paper Figures`` (params in M, FLOPs in
    G, as the papers print them) and the bare ``Backbone`` entries."""
    papers, paper_rows, arch_rows = {}, [], []
    for path in sorted(glob.glob(osp.join(configs, '*', 'metafile.yml'))):
        family = osp.basename(osp.dirname(path))
        for model in mmengine.load(path)['Models']:
            figures, backbone = model.get('Paper Figures'), model.get('Backbone')
            if figures:
                papers[family] = model['In Collection']
                row = dict(paper=family, table=figures['Table'], model=figures['Model'],
                           config=model['Config'], options=figures.get('Cfg Options') or {},
                           part=figures['Counted'], shape=tuple(figures['Input']),
                           params=model['Metadata']['Parameters'] / 1e6,
                           flops=model['Metadata'].get('FLOPs', 0) / 1e9 or None)
                if 'FLOPs FA' in figures:
                    row['flops_fa'] = figures['FLOPs FA'] and figures['FLOPs FA'] / 1e9
                paper_rows.append(row)
            if backbone:
                arch_rows.append(dict(model=backbone['Model'], type=backbone['Type'],
                                      arch=backbone['Arch'],
                                      options=backbone.get('Options') or {},
                                      shape=tuple(backbone['Input'])))
    return papers, paper_rows, arch_rows


PAPERS, PAPER_FIGURES, ARCH_FIGURES = read_metafiles()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument('config', nargs='?', help='config file')
    what.add_argument('--arch', nargs='+', metavar=('TYPE', 'ARCH'),
                      help='bare backbones instead of a config, e.g. SoLAVision t s')
    what.add_argument('--paper-tables', nargs='*', metavar='PAPER', choices=PAPERS,
                      help='our figures beside the papers\' (sola elfatt infvit)')
    what.add_argument('--arch-tables', nargs='*', metavar='TYPE',
                      choices=sorted({e['type'] for e in ARCH_FIGURES}),
                      help='every arch we ship (of these backbone types)')
    parser.add_argument('--shape', type=int, nargs='+', default=[224],
                        help='input H [W] (default 224)')
    parser.add_argument('--backbone-only', action='store_true',
                        help='count model.backbone only, as SoLA-Vision does')
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config entries (with --arch: backbone arguments)')
    args = parser.parse_args(argv)
    if args.arch is not None and len(args.arch) < 2:
        parser.error('--arch needs a backbone type and at least one arch')
    if len(args.shape) > 2:
        parser.error(f'--shape takes H or H W, got {args.shape}')
    args.shape = tuple(args.shape * 2)[:2]
    return args


def measure(model, shape, device='cpu'):
    """Complexity of ``model`` (whole or a backbone) on one random ``shape`` image."""
    model = model.to(device).eval()
    x = torch.randn(1, 3, *shape, device=device)
    if not hasattr(model, 'data_preprocessor'):  # a bare backbone
        return Complexity(model, x)
    samples = None
    if model.__class__.__module__.startswith('mmdet'):
        from mmdet.structures import DetDataSample
        meta = dict(img_shape=shape, ori_shape=shape, pad_shape=shape,
                    batch_input_shape=shape, scale_factor=(1., 1.))
        samples = [DetDataSample(metainfo=meta)]
    return Complexity(model, x, samples, mode='tensor')


def markdown(head, rows):
    return '\n'.join('| ' + ' | '.join(cells) + ' |'
                     for cells in [head, ['---'] * len(head)] + rows)


def kind_table(head, rows):
    """Markdown of ``[(cells, counts)]``: the cells, then GFLOPs in all and of each
    kind beyond fvcore's (attention, custom-op formulas)."""
    kinds = sorted(set().union(*(counts for _, counts in rows)) - PLAIN_KINDS)
    return markdown(head + ['GFLOPs'] + [f'of which {k}' for k in kinds], [
        cells + [f'{sum(counts.values()) / 1e9:.3f}'] + [
            f'{counts[k] / 1e9:.3f}' if counts[k] else '' for k in kinds]
        for cells, counts in rows])


def report(root, complexity):
    """Rows: backbone stages, then the model's other top-level parts, then total."""
    backbone = getattr(root, 'backbone', root)
    prefix = '' if backbone is root else 'backbone.'
    rows = [(prefix + label, p, c) for label, p, c in complexity.rows(backbone)]
    if backbone is not root:
        rows += [(name, complexity.params(child), complexity.kinds(child))
                 for name, child in [('backbone', backbone)] + [
                     c for c in root.named_children() if c[1] is not backbone]
                 if complexity.params(child) or complexity.kinds(child)]
    rows.append(('total', complexity.params(), complexity.kinds()))
    return kind_table(['part', 'params (M)'], [
        ([label, f'{params / 1e6:.3f}'], counts) for label, params, counts in rows])


def paper_row(entry, device='cpu'):
    """Our params, FLOPs and FLOPs without SDPA attention for a PAPER_FIGURES row."""
    part = build(osp.join(REPO, entry['config']), part=entry['part'],
                 cfg_options=entry['options'])
    complexity = measure(part, entry['shape'], device)
    kinds = complexity.kinds()
    total = sum(kinds.values())
    return complexity.params() / 1e6, total / 1e9, (total - kinds['attention']) / 1e9


def _diff(ours, paper):
    return f'{ours:.2f} ({100 * (ours / paper - 1):+.1f}%)' if paper else f'{ours:.2f}'


def run_paper_tables(args):
    print(markdown(['paper', 'table', 'model', 'input', 'counted', 'params (M) paper',
                    'ours', 'GFLOPs paper', 'ours', 'without SDPA: paper (FA)', 'ours'], []))
    papers = args.paper_tables or PAPERS
    for entry in [e for e in PAPER_FIGURES if e['paper'] in papers]:
        params, flops, flops_fa = paper_row(entry, args.device)
        fa = entry.get('flops_fa')
        cells = [PAPERS[entry['paper']], entry['table'], entry['model'],
                 '{}x{}'.format(*entry['shape']), entry['part'],
                 f"{entry['params']:g}", _diff(params, entry['params']),
                 f"{entry['flops']:g}" if entry['flops'] else '',
                 _diff(flops, entry['flops']), f'{fa:g}' if fa else '',
                 _diff(flops_fa, fa) if 'flops_fa' in entry else '']
        print('| ' + ' | '.join(cells) + ' |', flush=True)


def run_arch_tables(args):
    rows = []
    types = args.arch_tables or {e['type'] for e in ARCH_FIGURES}
    for e in [e for e in ARCH_FIGURES if e['type'] in types]:
        model = build(e['type'], cfg_options=dict(e['options'], arch=e['arch']))
        complexity = measure(model, e['shape'], args.device)
        rows.append(([e['model'], f"`{e['type']}(arch={e['arch']!r}"
                      + ''.join(f', {k}={v!r}' for k, v in e['options'].items()) + ')`',
                      '{}x{}'.format(*e['shape']), f'{complexity.params() / 1e6:.2f}'],
                     complexity.kinds()))
    print(kind_table(['model', 'backbone', 'input', 'params (M)'], rows), flush=True)


def main(argv=None):
    args = parse_args(argv)
    shape = args.shape
    if args.paper_tables is not None or args.arch_tables is not None:
        logger = MMLogger.get_current_instance()
        level = logger.level
        logger.setLevel(logging.ERROR)  # stdout: the table
        try:
            return (run_paper_tables if args.arch_tables is None else run_arch_tables)(args)
        finally:  # the logger outlives main() when called in-process (tests)
            logger.setLevel(level)
    if args.arch is not None:
        for arch in args.arch[1:]:
            model = build(args.arch[0], cfg_options=dict(args.cfg_options or {}, arch=arch))
            print(f'\n{args.arch[0]} arch={arch!r}, input 1x3x{shape[0]}x{shape[1]}\n')
            print(report(model, measure(model, shape, args.device)))
        return
    model = build(args.config, part='model', cfg_options=args.cfg_options)
    root = model.backbone if args.backbone_only else model
    print(f'{"backbone of " if args.backbone_only else ""}{type(model).__name__} from '
          f'{args.config}, input 1x3x{shape[0]}x{shape[1]}, multiply-adds (fvcore '
          'convention + attention + custom ops)\n')
    print(report(root, measure(root, shape, args.device)))


if __name__ == '__main__':
    main()
