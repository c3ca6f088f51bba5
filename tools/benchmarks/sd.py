"""Stable Diffusion 1.5 (random weights) with ELFATT-SD, ToMe-SD and Agent-SD,
Tables 10-12 of the ELFATT paper: one UNet call (``unet``) or its first
full-resolution self-attention (``attention``), in the ``early`` (ELFATT) and
``late`` phases; 2 x ``--batch`` latents (CFG); ``rel_diff`` against the baseline."""
import math

import torch

from tools.benchmarks.common import min_time, peak_mib, report, torch_dtype

SD15_UNET = dict(
    sample_size=64, in_channels=4, out_channels=4, layers_per_block=2,
    block_out_channels=(320, 640, 1280, 1280), norm_num_groups=32,
    down_block_types=('CrossAttnDownBlock2D', ) * 3 + ('DownBlock2D', ),
    up_block_types=('UpBlock2D', ) + ('CrossAttnUpBlock2D', ) * 3,
    cross_attention_dim=768, attention_head_dim=8)
DEFAULTS = dict(unet_latents=[64, 128], attn_latents=[64, 128], batch=4, repeat=5,
                ratios=[0.1, 0.2, 0.3, 0.4, 0.5], block_sizes=[32, 56, 81, 128, 227, 512])
# --reduced (CPU); options given on the command line still win
REDUCED = dict(unet_latents=[32], attn_latents=[64, 128], batch=1, repeat=2,
               ratios=[0.5], block_sizes=[128])
REPEAT = None  # DEFAULTS' or REDUCED's


def add_arguments(p):
    p.add_argument('--unet-latents', type=int, nargs='*', help='image = 8x latent')
    p.add_argument('--attn-latents', type=int, nargs='*')
    p.add_argument('--batch', type=int, help='images per call (x2 for CFG)')
    p.add_argument('--ratios', type=float, nargs='+', help='merge ratios')
    p.add_argument('--block-sizes', type=int, nargs='+',
                   help='ELFATT block sizes at the largest ratio (Table 11)')
    p.add_argument('--block-size', type=int, default=128, help='of the ratio sweep')
    p.add_argument('--agent-tokens', type=int, help='default: N/16 per layer')
    p.add_argument('--steps', type=int, default=50)
    p.add_argument('--elfatt-steps', type=float, default=0.2)
    p.add_argument('--reduced', action='store_true', help=f'CPU mode: {REDUCED}')


def methods(args):
    """(method, ratio, block_size, patch kwargs) rows of Tables 10 and 11."""
    rows = [('SD (baseline)', 0.0, None, None)]
    for r in args.ratios:
        rows += [('ToMe-SD', r, None, dict(ratio=r, elfatt_steps=0.0)),
                 ('Agent-SD', r, None, dict(ratio=r, mode='agent')),
                 ('ELFATT-SD', r, args.block_size, dict(ratio=r, block_size=args.block_size))]
    top = max(args.ratios)
    return rows + [('ELFATT-SD', top, b, dict(ratio=top, block_size=b))
                   for b in args.block_sizes if b != args.block_size]


def make_call(scope, unet, latent, args, dtype):
    """A UNet call (its hook tracks the step), or the first full-resolution
    self-attention layer alone (the step fed to the patch's tracker by hand)."""
    from mmhybrid.diffusion import ToMeElfattProcessor
    g, n = torch.Generator().manual_seed(0), 2 * args.batch
    if scope == 'unet':
        sample = torch.randn(n, 4, latent, latent, generator=g).to(args.device, dtype)
        context = torch.randn(n, 77, 768, generator=g).to(args.device, dtype)
        return lambda t: unet(sample, t, encoder_hidden_states=context).sample
    attn = unet.down_blocks[0].attentions[0].transformer_blocks[0].attn1
    hidden = torch.randn(n, latent * latent, attn.query_dim, generator=g).to(
        args.device, dtype)

    def call(t):
        if isinstance(attn.processor, ToMeElfattProcessor):
            attn.processor.tracker(None, (torch.empty(1, 4, latent, latent), t), {})
        return attn(hidden)
    return call


@torch.inference_mode()
def run(scope, unet, scheduler, latent, args, dtype):
    from mmhybrid.diffusion import apply_patch, remove_patch
    call = make_call(scope, unet, latent, args, dtype)
    steps = dict(early=scheduler.timesteps[0], late=scheduler.timesteps[-1])
    num_early = math.floor(args.elfatt_steps * args.steps + 0.5)
    rows, baseline = [], {}
    for method, ratio, block_size, kw in methods(args):
        if kw is not None:
            apply_patch(unet, **dict(dict(elfatt_steps=args.elfatt_steps), **kw),
                        agent_tokens=args.agent_tokens, scheduler=scheduler)
        phase = {}
        for name in ('late', ) if method == 'ToMe-SD' else ('early', 'late'):
            out = call(steps[name]).float()  # the warm-up
            baseline.setdefault(name, out)
            phase[name] = dict(
                ms_per_call=1e3 * min_time(lambda: call(steps[name]), args.repeat,
                                           args.device, warmup=0),
                peak_mib_per_img=(peak_mib(lambda: call(steps[name]), args.device)
                                  if args.device == 'cuda' else math.nan) / args.batch,
                rel_diff=float((out - baseline[name]).norm() / baseline[name].norm()))
        remove_patch(unet)
        early, late = (phase.get(p, phase['late'])['ms_per_call'] for p in steps)

        def per_img(n):  # s/img with n early steps of --steps
            return (n * early + (args.steps - n) * late) / 1e3 / args.batch
        for name, r in phase.items():
            rows.append(dict(scope=scope, image=8 * latent, tokens=latent * latent,
                             batch=args.batch, method=method, ratio=ratio,
                             block_size=block_size, phase=name, **r, s_per_img=per_img(
                                 num_early) if scope == 'unet' else None))
        print(f'  {scope} {8 * latent}^2 {method} {ratio} {block_size or "-"}: '
              f'{early:.1f} / {late:.1f} ms early / late', flush=True)
        if scope == 'unet' and (method, ratio, block_size) == (
                'ELFATT-SD', max(args.ratios), args.block_size):  # Table 12
            for n in range(0, args.steps // 2 + 1, max(1, args.steps // 10)):
                print(f'Table 12: {8 * latent}^2, {n:3d} ELFATT steps: {per_img(n):.3f} s/img')
    return rows


def main(args):
    for key in DEFAULTS:  # the options not given
        if getattr(args, key) is None:
            setattr(args, key, (REDUCED if args.reduced else DEFAULTS)[key])
    from diffusers import DDIMScheduler, UNet2DConditionModel
    dtype = torch_dtype(args, cuda='float16')
    torch.manual_seed(0)
    unet = UNet2DConditionModel(**SD15_UNET).eval().to(args.device, dtype)
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012,
                              beta_schedule='scaled_linear', set_alpha_to_one=False)
    scheduler.set_timesteps(args.steps)
    rows = [r for scope, latents in (('attention', args.attn_latents),
                                     ('unet', args.unet_latents))
            for latent in latents for r in run(scope, unet, scheduler, latent, args, dtype)]
    title = (f'SD 1.5 UNet (random weights), {str(dtype)[6:]}, {args.batch} image(s) x2 '
             f'(CFG), {args.steps} steps, ELFATT in the first {args.elfatt_steps:.0%}')
    report(args, f'sd_{args.device}', title, rows, [
        ('scope', 'scope', ''), ('image', 'image', 'd'), ('method', 'method', ''),
        ('ratio', 'ratio', '.1f'), ('block', 'block_size', 'd'), ('phase', 'phase', ''),
        ('ms/call', 'ms_per_call', '.1f'), ('MiB/img', 'peak_mib_per_img', '.1f'),
        ('rel. diff', 'rel_diff', '.4f'), ('s/img', 's_per_img', '.3f')], 'tokens',
        {'ms_per_call': 'ms per call'}, lambda r: ' '.join(
            f'{r[k]}' for k in ('scope', 'method', 'ratio', 'block_size', 'phase')))
