"""Ahead-of-time compile of every Triton kernel, for A100 (sm_80) and H100 (sm_90),
without a GPU.

The launch wrappers decide each kernel's specialisation (dtypes, block sizes,
``num_warps``, ``num_stages``), so this module asks them: inside
:func:`recorded_launches` a ``kernel[grid](...)`` call records its arguments
instead of running, and :func:`op_launches` drives an op's autograd function,
forward and backward, on small CPU tensors of the dtype and head dim asked for.
Each recorded launch is specialised as Triton's ``JITFunction.run`` would
(``tt.divisibility`` and constexprs from the real arguments), compiled with
``triton.compile`` for a :class:`GPUTarget` (ptxas ships in the triton package)
and summarised: registers, spilled bytes, shared memory (Triton's allocation),
and SASS instruction counts from ``cuobjdump -sass`` (also shipped with triton).

Results are cached on disk (``$MMHYBRID_CACHE`` or ``~/.cache/mmhybrid``) keyed by
the kernel's source hash (Triton's ``cache_key``, which covers the ``@jit``
helpers it calls), the specialisation, the options, the target and the Triton
version: a changed kernel or launch configuration compiles afresh.

Written against Triton 3.8 (it uses ``JITFunction._pack_args``). Command line:
``python -m tools.analysis.compile_check [--full] [--csv FILE]``.
"""
import argparse
import contextlib
import dataclasses
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter

import torch

from tools.results import write_csv

# per-block shared-memory limits (opt-in maximum, bytes)
TARGETS = {'A100': (80, 166_912), 'H100': (90, 232_448)}
_FORMAT = 2  # of the cached result files
SASS_GROUPS = {
    'global': ('LDG', 'STG', 'RED', 'ATOMG'),
    'shared': ('LDS', 'STS', 'LDSM', 'ATOMS'),
    'local': ('LDL', 'STL'),
    'shuffle': ('SHFL', ),
    'sfu': ('MUFU', ),
    'tensor': ('HMMA', 'HGMMA', 'IMMA', 'DMMA'),
}
_SASS_LINE = re.compile(r'/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)')


@dataclasses.dataclass
class Launch:
    """One recorded ``kernel[grid](*args, **kwargs)``."""
    kernel: object
    args: tuple
    kwargs: dict
    grid: tuple

    @property
    def name(self):
        return self.kernel.fn.__name__


@contextlib.contextmanager
def recorded_launches():
    """Inside the block, launches of ``@triton.jit`` kernels are recorded (yielded
    list of :class:`Launch`) and not run; their outputs stay uninitialised."""
    from triton.runtime.jit import JITFunction
    launches, run = [], JITFunction.run

    def record(self, *args, grid, warmup, **kwargs):
        launches.append(Launch(self, args, kwargs, tuple(grid)))

    JITFunction.run = record
    try:
        yield launches
    finally:
        JITFunction.run = run


# -- the configurations the wrappers can choose --------------------------------------
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# (op, dims): EFFATT and Linear InfSA take (B, heads, N, d) with the head dims of our
# archs (ELFATT/CSWin 32, InfViT 16 and 64, d = 64 for wider ELFATT heads); WKV
# takes (B, T, C) at SoLA's channel widths, short and long sequences (the carry
# scan's block depends on T / 64).
SHAPES = {
    'effatt': [(1, 2, 200, 32), (1, 2, 200, 64)],
    'linear_infsa': [(1, 2, 200, 16), (1, 2, 200, 64)],
    'bi_wkv': [(1, 300, 96), (1, 16384, 128), (1, 4096, 512)],
}


def cases(full=False):
    """(op, dtype, shape) to compile. The default set covers every kernel, every
    dtype and every head dim once (EFFATT's big tiles: both dims in every dtype);
    ``full`` is the product."""
    return [(op, dtype, shape) for op, shapes in SHAPES.items()
            for i, dtype in enumerate(DTYPES)
            for shape in (shapes if full or op == 'effatt' else
                          [shapes[i % len(shapes)]])]


def op_launches(op, dtype, shape):
    """The kernel launches of ``op`` (forward and backward) on CPU tensors of
    ``shape`` and ``dtype``, as its wrapper configures them for CUDA tensors."""
    from mmhybrid.ops.elfatt.fused import effatt_forward
    from mmhybrid.ops.infsa.fused import linear_infsa_forward
    from mmhybrid.ops.wkv.fused import bi_wkv_forward
    x = [torch.zeros(shape, dtype=dtype, requires_grad=True) for _ in range(3)]
    w = [torch.zeros(shape[-1], requires_grad=True) for _ in range(2)]
    apply, args = {'bi_wkv': (bi_wkv_forward, w + x[:2]), 'effatt': (effatt_forward, x),
                   'linear_infsa': (linear_infsa_forward, x + [1e-6])}[op]
    with recorded_launches() as launches:
        out = apply(*args)[0]
        out.backward(torch.zeros_like(out))
    return launches


# -- compiling one launch -------------------------------------------------------------
def _sass_counts(cubin):
    from triton import knobs
    with tempfile.NamedTemporaryFile(suffix='.cubin') as f:
        f.write(cubin)
        f.flush()
        sass = subprocess.run([knobs.nvidia.cuobjdump.path, '-sass', f.name],
                              capture_output=True, text=True, check=True).stdout
    ops = Counter(m.group(1).split('.')[0] for m in map(_SASS_LINE.search,
                                                        sass.splitlines()) if m)
    return {'sass': sum(ops.values()), **{f'sass_{group}': sum(ops[n] for n in names)
                                          for group, names in SASS_GROUPS.items()}}


def compile_launch(launch, target_name):
    """Compile ``launch`` for ``'A100'`` or ``'H100'``; returns a dict of figures
    (registers, spill bytes, shared memory and its limit, warps, stages, SASS
    instruction counts). Cached on disk."""
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    arch, smem_limit = TARGETS[target_name]
    target = GPUTarget('cuda', arch, 32)
    backend, fn = make_backend(target), launch.kernel
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    options, signature, constexprs, attrs = fn._pack_args(
        backend, launch.kwargs, *binder(*launch.args, **launch.kwargs))
    key = json.dumps([fn.cache_key, signature, *(repr(sorted(d.items())) for d in (
        constexprs, attrs, options.__dict__)), arch, triton.__version__, _FORMAT],
                     default=str)
    root = os.path.join(os.environ.get('MMHYBRID_CACHE') or os.path.join(
        os.path.expanduser('~'), '.cache', 'mmhybrid'), 'compile_check')
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, hashlib.sha256(key.encode()).hexdigest() + '.json')
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    out = io.StringIO()
    with knobs.nvidia.scope(), knobs.compilation.scope():
        knobs.nvidia.dump_ptxas_log = True  # printed to stdout by make_cubin
        knobs.compilation.always_compile = True  # Triton's cache would skip ptxas
        with contextlib.redirect_stdout(out):
            kernel = triton.compile(ASTSource(fn, signature, constexprs, attrs),
                                    target=target, options=options.__dict__)
    log = out.getvalue()
    regs = re.findall(r'Used (\d+) registers', log)
    spill = re.findall(r'(\d+) bytes spill stores, (\d+) bytes spill loads', log)
    if not regs or not spill:
        raise RuntimeError(f'no register/spill figures in the ptxas log:\n{log}')
    # the arguments the code reads: PTX loads parameter i of the non-constexpr ones
    params = [name for name, kind in signature.items() if kind != 'constexpr']
    read = {int(i) for i in re.findall(rf'{kernel.metadata.name}_param_(\d+)\]',
                                       kernel.asm['ptx'])}
    result = dict(kernel=launch.name, target=target_name, registers=int(regs[-1]),
                  spill_stores=int(spill[-1][0]), spill_loads=int(spill[-1][1]),
                  shared=kernel.metadata.shared, shared_limit=smem_limit,
                  num_warps=kernel.metadata.num_warps,
                  num_stages=kernel.metadata.num_stages,
                  signature=','.join(v for v in signature.values() if v != 'constexpr'),
                  used_args=[name for i, name in enumerate(params) if i in read],
                  constexprs={list(signature)[path[0]]: str(value)
                              for path, value in constexprs.items()},
                  **_sass_counts(kernel.asm['cubin']))
    with open(path + '.tmp', 'w') as f:
        json.dump(result, f)
    os.replace(path + '.tmp', path)
    return result


def problems(row):
    """What is wrong with a compiled kernel (empty when it fits and does not spill)."""
    spills = bool(row['spill_stores'] or row['spill_loads'])
    over = row['shared'] > row['shared_limit']
    return ([f"spills {row['spill_stores']} B / loads {row['spill_loads']} B"] * spills
            + [f"shared memory {row['shared']} B > {row['shared_limit']} B"] * over)


def check(full=False):
    """Rows (dicts) for every distinct launch of :func:`cases` on every target."""
    rows, seen = [], set()
    for op, dtype, shape in cases(full):
        for launch in op_launches(op, dtype, shape):
            for target in TARGETS:
                row = compile_launch(launch, target)
                ident = (target, row['kernel'], row['signature'], row['num_warps'],
                         row['num_stages'], json.dumps(row['constexprs'], sort_keys=True))
                if ident not in seen:
                    seen.add(ident)
                    rows.append(dict(op=op, dtype=str(dtype).split('.')[-1],
                                     shape='x'.join(map(str, shape)), **row))
    return rows


COLUMNS = ('target', 'op', 'kernel', 'dtype', 'shape', 'num_warps', 'num_stages',
           'registers', 'spill_stores', 'shared', 'sass',
           *map('sass_{}'.format, SASS_GROUPS))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--full', action='store_true', help='every dtype x shape')
    parser.add_argument('--csv', help='write the rows to this CSV file')
    args = parser.parse_args(argv)
    rows = check(args.full)
    print(' '.join(f'{c:>12}' for c in COLUMNS))
    for row in rows:
        print(' '.join(f'{str(row[c])[:24]:>12}' for c in COLUMNS),
              '; '.join(problems(row)), flush=True)
    if args.csv:
        write_csv(rows, args.csv, COLUMNS + ('constexprs', ))
    bad = [row for row in rows if problems(row)]
    print(f'{len(rows)} compiled kernels, {len(bad)} with problems '
          f'(SASS counts are static instructions from cuobjdump -sass)')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
