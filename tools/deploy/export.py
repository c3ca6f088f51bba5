"""Export a backbone, a whole segmentor or detector, then check it against eager.

CONFIG_OR_BACKBONE is a config file (mmseg, mmdet or mmpretrain; ``--part`` picks its
backbone or, for an mmseg ``EncoderDecoder``, the whole inference graph up to the
raw logits, or for an mmdet two-stage detector, the whole detector up to padded
boxes, labels and masks, ``detector_graph.TwoStageDetections``), a backbone type such as
``mmhybrid.SoLAVision`` whose arguments come from ``--cfg-options`` (e.g.
``arch=t``), or the name of a tiny backbone of ``tools/deploy/cases.py``.

The graph takes (batch, 3, H, W) images with dynamic batch, height and width (as
general as torch.export's guards allow; ``--static`` fixes the export size). After
exporting, the file is run (onnxruntime's CPU provider, or the loaded
``ExportedProgram``) at other sizes (:func:`default_check_shapes`: off the patch
and 32-pixel grids, and what mmseg's keep-ratio test resize makes of a non-square
image), with one image more than the export batch, and compared with eager PyTorch; a relative error above ``--tol`` (max |diff| / max |eager| per
output), an error at run time, or a model the graph cannot represent (see
:func:`refusals`) deletes the file and exits with status 1 and the reason. What is
built for each ``--part``: ``exportable.py``.
"""
import argparse
import os
import os.path as osp
import sys
import time

import torch

from mmhybrid.utils import CheckpointError
from tools.deploy.cases import CASES, WHOLE_MODELS, build_case
from tools.deploy.exportable import build

FORMATS = ('onnx', 'torch-export')
EXPORTERS = ('torchscript', 'dynamo')
OPSET = 18


def refusals(model, fmt='onnx', exporter='torchscript'):
    """Reasons why an exported graph of ``model`` could not match eager PyTorch."""
    route = exporter if fmt == 'onnx' else fmt
    why = getattr(model, 'unsupported_exports', {}).get(route)
    reasons = [f'{route} cannot export {type(model).__name__}: {why}'] if why else []
    for name, p in model.named_parameters():
        # bi_wkv's graphs hold its fp32 path only; it needs T max|w| = max|decay|
        # <= 30 and -20 <= u <= 30 (ops/wkv/chunk.py)
        if name.endswith('spatial_decay') and p.detach().abs().max() > 30:
            reasons.append(f'{name}: max |decay| = {p.abs().max():.1f} > 30, outside '
                           f'the range of the exported WKV path')
        if name.endswith('spatial_first') and not (-20 <= p.min() and p.max() <= 30):
            reasons.append(f'{name}: bonus outside [-20, 30], outside the range of '
                           f'the exported WKV path')
    return reasons


def _as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out, )


def export_onnx(model, x, path, exporter='torchscript', static=False):
    """Write ``model`` on images like ``x`` to ``path`` (opset >= 17)."""
    with torch.no_grad():
        outs = _as_tuple(model(x))
    named = getattr(model, 'output_names', None)  # outputs sized by the model, not H, W
    names = list(named)[:len(outs)] if named else [f'out{i}' for i in range(len(outs))]
    if exporter == 'dynamo':
        kwargs = dict(dynamic_shapes=None if static else (_dims(), ), optimize=True,
                      external_data=False)
    else:  # batch everywhere; H and W of the input and of unnamed (B, C, H, W) maps
        spatial = ['input'] + ([] if named else
                               [n for n, t in zip(names, outs) if t.dim() == 4])
        kwargs = dict(dynamic_axes=None if static else {
            n: {0: 'batch', **({2: f'{n}_height', 3: f'{n}_width'} if n in spatial
                               else {})} for n in ['input'] + names})
    torch.onnx.export(model, (x, ), path, dynamo=exporter == 'dynamo',
                      opset_version=OPSET, input_names=['input'], output_names=names,
                      **kwargs)
    return path


def _dims():
    """Dynamic batch, H and W. ``Dim.AUTO`` lets torch.export keep each size as
    general as its guards allow (lower bounds such as two blocks per stage become
    range constraints) instead of failing; a size it had to fix shows up in the
    check at other sizes."""
    auto = torch.export.Dim.AUTO
    return {0: auto, 2: auto, 3: auto}


def onnx_runner(path, threads=1):
    """A function running the ONNX file in onnxruntime's CPU provider."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=['CPUExecutionProvider'])

    def run(x):
        return [torch.from_numpy(o) for o in session.run(None, {'input': x.numpy()})]

    return run


def relative_error(outs, refs):
    """max over outputs of max |out - ref| / max |ref|."""
    if len(outs) != len(refs):
        raise RuntimeError(f'{len(outs)} outputs, eager has {len(refs)}')
    err = 0.
    for out, ref in zip(outs, refs):
        if out.shape != ref.shape:
            raise RuntimeError(f'output shape {tuple(out.shape)}, eager '
                               f'{tuple(ref.shape)}')
        ref = ref.float()
        scale = ref.abs().max().clamp_min(1e-12)
        err = max(err, ((out.float() - ref).abs().max() / scale).item())
    return err


def error_line(err, width=200):
    """``Type: the first line of the message`` of an exception (which may be empty)."""
    return f'{type(err).__name__}: {(str(err).splitlines() or [""])[0][:width]}'


def compile_check(model, x, backward=False, backend='inductor'):
    """Relative error of ``torch.compile(model, fullgraph=True)`` against eager.

    The forward outputs, and with ``backward`` the gradients of the input and of
    every parameter (of a fixed random projection of the outputs: the plain mean
    of a normalised output has gradients that are rounding noise), are compared;
    any graph break raises (``fullgraph=True``). Returns max |diff| / max |eager|
    over all.
    """
    import torch._dynamo
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    results = []
    weights = None
    for fn in (model, compiled):
        model.zero_grad(set_to_none=True)
        inp = x.clone().requires_grad_(backward)
        with torch.set_grad_enabled(backward):
            outs = _as_tuple(fn(inp))
            if backward:
                if weights is None:
                    gen = torch.Generator().manual_seed(0)
                    weights = [torch.randn(o.shape, generator=gen) for o in outs]
                sum((o.float() * w).sum() for o, w in zip(outs, weights)).backward()
        tensors = [o.detach() for o in outs]
        if backward:
            tensors.append(inp.grad)
            tensors += [p.grad for p in model.parameters() if p.grad is not None]
        results.append(tensors)
    torch._dynamo.reset()
    # a detector's graph pairs its detections (ties may come in either order)
    return getattr(model, 'parity_error', relative_error)(results[1], results[0])


def default_check_shapes(shape, stride=32):
    """Where a dynamic graph is checked unless told: one size on the ``stride``
    grid, two off the patch grid and the 32-grid (250x333, 97x131), and what
    mmseg's ADE20K test resize (``Resize(scale=(2048, 512), keep_ratio=True)``, no
    padding) makes of a 427x640 image with the export's short side S for 512
    (``scale=(4 S, S)``: 512x767 for S = 512, 96x144 for S = 96)."""
    from mmcv import rescale_size
    (H, W), d = shape, stride
    S = min(H, W)
    w, h = rescale_size((640, 427), (4 * S, S))
    return [(H + d, W + 2 * d), (250, 333), (97, 131), (h, w)]


def export_and_check(model, shape, path, fmt='onnx', exporter='torchscript',
                     static=False, check_shapes=None, stride=32, tol=1e-4, batch=2):
    """Export, then check; returns (ok, report lines). A failed check deletes
    ``path``."""
    reasons = refusals(model, fmt, exporter)
    if reasons:
        return False, ['refused: ' + r for r in reasons]
    shapes = [tuple(shape)] if static else (check_shapes or
                                            default_check_shapes(shape, stride))
    check_batch = batch if static else batch + 1  # a graph frozen at its batch fails
    x = torch.randn(batch, 3, *shape)
    start = time.perf_counter()
    if fmt == 'onnx':
        run = onnx_runner(export_onnx(model, x, path, exporter, static))
    else:
        program = torch.export.export(  # dynamic batch, H and W unless static
            model, (x, ), dynamic_shapes=None if static else (_dims(), ))
        torch.export.save(program, path)
        module = program.module()
        run = torch.no_grad()(lambda x: _as_tuple(module(x)))
    lines = [f'exported {path} ({fmt}{"/" + exporter if fmt == "onnx" else ""}, '
             f'{"static" if static else "dynamic batch/H/W"}) in '
             f'{time.perf_counter() - start:.1f} s']
    if fmt != 'onnx' and not static:
        lines.append('  input sizes the program accepts: ' + ', '.join(
            f'{s}: {r}' for s, r in program.range_constraints.items()))
    lines.append(f'  checked at batch {check_batch}:')
    error = getattr(model, 'parity_error', relative_error)  # the model's own, if any
    served, failed = [], []
    for h, w in shapes:
        x = torch.randn(check_batch, 3, h, w, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            refs = _as_tuple(model(x))
        try:
            err = error(run(x), refs)
        except Exception as exc:  # a graph that cannot run there is a failed check
            err = error_line(exc)
        good = isinstance(err, float) and err <= tol
        (served if good else failed).append(f'{h}x{w}')
        lines.append(f'  {h}x{w}: ' + (f'rel err {err:.1e}' if isinstance(
            err, float) else err) + ('' if good else f'  FAIL (tol {tol:g})'))
    if failed:
        if path and osp.exists(path):
            os.remove(path)
        lines.append(f'refused: the exported graph does not match eager PyTorch at '
                     f'{", ".join(failed)} (it does at {", ".join(served) or "none"} of '
                     f'the sizes checked); {path} removed')
    return not failed, lines


def build_model(spec, checkpoint=None, part='backbone', cfg_options=None):
    """CONFIG_OR_BACKBONE of the command line, in eval mode: a case of ``cases.py``
    by name, else :func:`exportable.build`'s model."""
    if spec not in CASES and spec not in WHOLE_MODELS:
        return build(spec, checkpoint, part, cfg_options)
    if checkpoint or part != 'backbone' or cfg_options:
        raise SystemExit(f'{spec} is a built-in case: it takes no checkpoint, '
                         '--part or --cfg-options')
    return build_case(spec)


def parse_args(argv=None):
    from mmengine.config import DictAction
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('model', help='config file or backbone type')
    parser.add_argument('checkpoint', nargs='?', help='checkpoint (optional); '
                        'trusted://PATH for your own file holding Python objects '
                        "(mmengine's CheckpointHook writes such files)")
    parser.add_argument('--format', choices=FORMATS, default='onnx')
    parser.add_argument('--exporter', choices=EXPORTERS, default='torchscript',
                        help='ONNX exporter (default: torchscript)')
    parser.add_argument('--shape', nargs=2, type=int, default=(256, 320),
                        metavar=('H', 'W'), help='export size')
    parser.add_argument('--part', choices=('backbone', 'segmentor', 'detector'),
                        default='backbone')
    parser.add_argument('--static', action='store_true',
                        help='fixed batch and size (checked at the export size)')
    parser.add_argument('--check-shapes', nargs='+', type=int, metavar='H W',
                        help='sizes of the parity check (default: four, see '
                        'default_check_shapes)')
    parser.add_argument('--stride', type=int, default=32,
                        help='H and W are multiples of this')
    parser.add_argument('--tol', type=float, default=1e-4)
    parser.add_argument('--out', help='output file (default: <model>_<part>.onnx|.pt2 '
                        'next to a local checkpoint, else under work_dirs/deploy/)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, default={})
    args = parser.parse_args(argv)
    if args.check_shapes and len(args.check_shapes) % 2:
        parser.error('--check-shapes takes pairs H W')
    return args


def default_out(model, checkpoint, part, fmt):
    """``<model>_<part>.onnx`` (or ``.pt2``) next to a local checkpoint, else in
    ``work_dirs/deploy/`` (never the working directory itself: a repository)."""
    stem = (osp.splitext(osp.basename(model))[0] if model.endswith('.py')
            else model.rsplit('.', 1)[-1])  # a backbone type: mmhybrid.SoLAVision
    local = checkpoint and checkpoint.removeprefix('trusted://')
    folder = (osp.dirname(osp.abspath(local)) if local and '://' not in local
              else osp.join('work_dirs', 'deploy'))
    return osp.join(folder, f'{stem}_{part}.{"onnx" if fmt == "onnx" else "pt2"}')


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(1)
    try:
        model = build_model(args.model, args.checkpoint, args.part, args.cfg_options)
    except (CheckpointError, FileNotFoundError) as err:
        raise SystemExit(f'error: {err}') from None
    out = args.out or default_out(args.model, args.checkpoint, args.part, args.format)
    os.makedirs(osp.dirname(osp.abspath(out)), exist_ok=True)
    shapes = (None if not args.check_shapes else
              list(zip(args.check_shapes[::2], args.check_shapes[1::2])))
    ok, lines = export_and_check(model, args.shape, out, args.format, args.exporter,
                                 args.static, shapes, args.stride, args.tol)
    print('\n'.join(lines))
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
