"""Time and memory of Stable Diffusion 1.5 with ELFATT-SD, ToMe-SD and Agent-SD.

The UNet is the SD 1.5 architecture with random weights (nothing downloaded). Rows
follow Tables 10-12 of the ELFATT paper: baseline SDPA, ToMe-SD, Agent-SD (agent
attention in every head) and ELFATT-SD across merge ratios and block sizes, in two
scopes: ``unet`` (one UNet call) and ``attention`` (one full-resolution self-attention
layer, ``down_blocks.0...attn1``, the only kind of layer the patch changes; merge and
unmerge included). Patched methods are timed in both phases: ``early`` (the first
``--elfatt-steps`` of the schedule: agent/ELFATT attention on merged tokens) and
``late`` (ToMe-SD only). The batch holds 2 x ``--batch`` latents (classifier-free
guidance). ``s_per_img`` combines the phases over ``--steps`` steps (unet scope).
``rel_diff`` is ||out - baseline|| / ||baseline|| of the same call. Peak memory is the
activation peak of a call per image, measured on CUDA only. Prints a table, writes
CSV and PNG.

    python tools/benchmarks/run.py --suite sd                 # GPU: 512^2, 1024^2, fp16
    python tools/benchmarks/run.py --suite sd --device cpu --reduced
"""
import math

import torch

from common import min_time, peak_mib, save
from mmhybrid.diffusion import ToMeElfattProcessor, apply_patch, remove_patch

SD15_UNET = dict(
    sample_size=64, in_channels=4, out_channels=4, layers_per_block=2,
    block_out_channels=(320, 640, 1280, 1280), norm_num_groups=32,
    down_block_types=('CrossAttnDownBlock2D', ) * 3 + ('DownBlock2D', ),
    up_block_types=('UpBlock2D', ) + ('CrossAttnUpBlock2D', ) * 3,
    cross_attention_dim=768, attention_head_dim=8)


DEFAULTS = dict(unet_latents=[64, 128], attn_latents=[64, 128], batch=4,
                ratios=[0.1, 0.2, 0.3, 0.4, 0.5],
                block_sizes=[32, 56, 81, 128, 227, 512])
# --reduced (CPU): unet at 256^2, attention at 512^2 and 1024^2, one image, ratio
# 0.5, block 128, 2 repeats; options given on the command line still win
REDUCED = dict(unet_latents=[32], attn_latents=[64, 128], batch=1, ratios=[0.5],
               block_sizes=[128], repeat=2)


def add_arguments(p):
    p.add_argument('--dtype', default=None, choices=['fp32', 'fp16', 'bf16'],
                   help='default: fp16 on CUDA, fp32 on CPU')
    p.add_argument('--unet-latents', type=int, nargs='*', default=None,
                   help='latent sizes of the unet scope (image = 8x latent; 64 128)')
    p.add_argument('--attn-latents', type=int, nargs='*', default=None,
                   help='latent sizes of the attention scope (64 128)')
    p.add_argument('--batch', type=int, default=None,
                   help='images per call (x2 for CFG; 4)')
    p.add_argument('--ratios', type=float, nargs='+', default=None,
                   help='merge ratios (0.1 .. 0.5)')
    p.add_argument('--block-sizes', type=int, nargs='+', default=None,
                   help='ELFATT block sizes swept at the largest ratio (Table 11)')
    p.add_argument('--block-size', type=int, default=128, help='block size of the ratio sweep')
    p.add_argument('--agent-tokens', type=int, default=None,
                   help='agents per layer (default: one per 4x4 window, N/16)')
    p.add_argument('--steps', type=int, default=50)
    p.add_argument('--elfatt-steps', type=float, default=0.2)
    p.add_argument('--reduced', action='store_true',
                   help='CPU mode: ' + ', '.join(f'{k} {v}' for k, v in REDUCED.items()))


def default_repeat(args):
    return REDUCED['repeat'] if args.reduced else 5


def resolve(args):
    """Fill the options not given: from REDUCED with --reduced, else DEFAULTS."""
    for key, value in DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, REDUCED[key] if args.reduced else value)
    if args.dtype is None:
        args.dtype = 'fp16' if args.device == 'cuda' else 'fp32'


def methods(args):
    """(method, ratio, block_size, patch kwargs) rows of Tables 10 and 11."""
    rows = [('SD (baseline)', 0.0, None, None)]
    for ratio in args.ratios:
        rows.append(('ToMe-SD', ratio, None, dict(ratio=ratio, elfatt_steps=0.0)))
        rows.append(('Agent-SD', ratio, None, dict(ratio=ratio, mode='agent')))
        rows.append(('ELFATT-SD', ratio, args.block_size,
                     dict(ratio=ratio, block_size=args.block_size)))
    top = max(args.ratios)
    rows += [('ELFATT-SD', top, b, dict(ratio=top, block_size=b))
             for b in args.block_sizes if b != args.block_size]
    return rows


def unet_scope(unet, latent, args, dtype):
    """A UNet call at ``latent``; the patch's hook tracks the step itself."""
    g = torch.Generator().manual_seed(0)
    n = 2 * args.batch
    sample = torch.randn(n, 4, latent, latent, generator=g).to(args.device, dtype)
    context = torch.randn(n, 77, 768, generator=g).to(args.device, dtype)
    return lambda t: unet(sample, t, encoder_hidden_states=context).sample


def attention_scope(unet, latent, args, dtype):
    """The first full-resolution self-attention layer on its own; the step the
    UNet hook would record is fed to the patch's tracker by hand."""
    attn = unet.down_blocks[0].attentions[0].transformer_blocks[0].attn1
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(2 * args.batch, latent * latent, attn.query_dim,
                         generator=g).to(args.device, dtype)
    shape_only = torch.empty(1, 4, latent, latent)

    def call(t):
        if isinstance(attn.processor, ToMeElfattProcessor):
            attn.processor.tracker(None, (shape_only, t), {})
        return attn(hidden)
    return call


@torch.inference_mode()
def measure(call, t, repeats, device):
    """Minimum seconds per call after the call that gives the output (the
    warm-up), activation peak in MiB (CUDA only: a CPU UNet call takes tens of
    seconds), and the output."""
    out = call(t).float()
    seconds = min_time(lambda: call(t), repeats, device, warmup=0)
    peak = peak_mib(lambda: call(t), device) if device == 'cuda' else float('nan')
    return seconds, peak, out


def run(scope, make_call, unet, scheduler, latent, args, dtype):
    call = make_call(unet, latent, args, dtype)
    t_early, t_late = scheduler.timesteps[0], scheduler.timesteps[-1]
    num_early = math.floor(args.elfatt_steps * args.steps + 0.5)
    results, baseline = [], {}
    for method, ratio, block_size, kwargs in methods(args):
        if kwargs is not None:
            kwargs = dict(kwargs)
            apply_patch(unet, elfatt_steps=kwargs.pop('elfatt_steps', args.elfatt_steps),
                        agent_tokens=args.agent_tokens, scheduler=scheduler, **kwargs)
        phases = {}
        for phase, t in (('early', t_early), ('late', t_late)):
            if method == 'ToMe-SD' and phase == 'early':
                continue  # one phase only
            sec, peak, out = measure(call, t, args.repeat, args.device)
            if kwargs is None:
                baseline[phase] = out
            diff = float((out - baseline[phase]).norm() / baseline[phase].norm())
            phases[phase] = (sec, peak, diff)
        remove_patch(unet)
        phases.setdefault('early', phases['late'])
        per_img = (num_early * phases['early'][0] +
                   (args.steps - num_early) * phases['late'][0]) / args.batch
        for phase, (sec, peak, diff) in phases.items():
            results.append(dict(
                scope=scope, image=8 * latent, tokens=latent * latent, batch=args.batch,
                method=method, ratio=ratio, block_size=block_size or '', phase=phase,
                ms_per_call=round(1e3 * sec, 2),
                peak_mib_per_img=round(peak / args.batch, 1) if peak == peak else '',
                rel_diff=f'{diff:.4f}',
                s_per_img=round(per_img, 3) if scope == 'unet' else ''))
        early, late = phases['early'], phases['late']
        print(f"{scope:<9} {8 * latent:>4}^2 {method:<13} {ratio:<4} {str(block_size or '-'):>4}"
              f" | early {1e3 * early[0]:9.1f} ms {early[1] / args.batch:8.1f} MiB/img "
              f"diff {early[2]:.4f} | late {1e3 * late[0]:9.1f} ms {late[1] / args.batch:8.1f}"
              f" MiB/img diff {late[2]:.4f}", flush=True)
    return results


def table12(results, args):
    """(image, ELFATT steps, s/img) of ELFATT-SD at the largest ratio, derived from
    the measured early and late UNet calls."""
    rows = []
    for r in results:
        if (r['scope'], r['method'], r['phase'], r['ratio'], r['block_size']) == (
                'unet', 'ELFATT-SD', 'early', max(args.ratios), args.block_size):
            late = next(x for x in results if x['phase'] == 'late' and all(
                x[k] == r[k] for k in ('scope', 'image', 'method', 'ratio', 'block_size')))
            for early_steps in range(0, args.steps // 2 + 1, max(1, args.steps // 10)):
                sec = (early_steps * r['ms_per_call'] +
                       (args.steps - early_steps) * late['ms_per_call']) / 1e3 / args.batch
                rows.append((r['image'], early_steps, sec))
    return rows


def label(r):
    return f"{r['method']} {r['ratio']}" + (f" b{r['block_size']}" if r['block_size'] else '')


def plot(results, path):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    panels = list(dict.fromkeys((r['scope'], r['image']) for r in results))
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 5), squeeze=False)
    for ax, (scope, image) in zip(axes[0], panels):
        rows = [r for r in results if (r['scope'], r['image']) == (scope, image)]
        labels = list(dict.fromkeys(label(r) for r in rows))
        for i, phase in enumerate(('early', 'late')):
            ms = {label(r): r['ms_per_call'] for r in rows if r['phase'] == phase}
            ax.bar([x + 0.4 * i for x in range(len(labels))],
                   [ms.get(lab, 0) for lab in labels], width=0.4, label=f'{phase} steps')
        ax.set_xticks([x + 0.2 for x in range(len(labels))])
        ax.set_xticklabels(labels, rotation=90, fontsize=7)
        ax.set_ylabel('ms per call')
        ax.set_title(f'SD 1.5 {scope} call, {image}^2 image')
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(args):
    resolve(args)
    from diffusers import DDIMScheduler, UNet2DConditionModel
    dtype = dict(fp32=torch.float32, fp16=torch.float16, bf16=torch.bfloat16)[args.dtype]
    torch.manual_seed(0)
    unet = UNet2DConditionModel(**SD15_UNET).eval().to(args.device, dtype)
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012,
                              beta_schedule='scaled_linear', set_alpha_to_one=False)
    scheduler.set_timesteps(args.steps)
    print(f'SD 1.5 UNet (random weights), {args.device} {args.dtype}, {args.batch} image(s) '
          f'x2 (CFG), {args.steps} steps, ELFATT in the first {args.elfatt_steps:.0%}')
    results = []
    for latent in args.attn_latents:
        results += run('attention', attention_scope, unet, scheduler, latent, args, dtype)
    for latent in args.unet_latents:
        results += run('unet', unet_scope, unet, scheduler, latent, args, dtype)
    rows = table12(results, args)
    if rows:
        print('\nTable 12 layout: s/img vs ELFATT steps (from the measured unet phases)')
        for image, early_steps, sec in rows:
            print(f'{image:>5}^2  {early_steps:3d} ELFATT steps  {sec:8.3f} s/img')
    stem = save(results, args.out, f'sd_{args.device}')
    plot(results, stem + '.png')
    print(f'wrote {stem}.csv and {stem}.png')
