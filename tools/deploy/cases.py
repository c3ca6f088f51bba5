"""The tiny backbones of every family and attention plan, for the deploy checks.

Real architectures at small widths (same layers, ops and code paths as the paper
sizes): SoLA with its four layer letters (L: WKV, S: softmax, G: gated delta rule,
W: sliding window), InfiniteVL, Swin- and CSWin-ELFATT with each attention plan,
InfViT (pure, linear and mixed) and HAViT. ``build_case(name)`` returns the module
in eval mode.
"""
SOLA_ROUTES = (((1, 2), (3, 3)), ((2, 2), (3, 6)), ((3, 2), (4, 2)))
DIMS = (16, 16, 32, 32)
VIT = dict(embed_dims=32, depth=3, num_heads=4, mlp_ratio=2.)
HAVIT = dict(type='mmhybrid.HAViT', arch=VIT, img_size=32, patch_size=8,
             drop_path_rate=0., out_type='featmap')

CASES = {
    # the smallest SoLA with every part (WKV, softmax, a Hidden State Bridge)
    'sola-min': dict(type='mmhybrid.SoLAVision', head_dim=16, drop_path_rate=0.,
                     arch=dict(embed_dims=DIMS, schedule='L/L/LS/L',
                               hsb_routes=(((1, 1), (3, 2)), ))),
    'sola-LS': dict(type='mmhybrid.SoLAVision', head_dim=16, drop_path_rate=0.,
                    arch=dict(embed_dims=DIMS, schedule='LL/LL/LLSLLS/LS',
                              hsb_routes=SOLA_ROUTES)),
    'sola-GWS': dict(type='mmhybrid.SoLAVision', head_dim=8, window_size=3,
                     drop_path_rate=0.,
                     arch=dict(embed_dims=DIMS, schedule='GG/WG/GGSWGS/GS')),
    'infinitevl': dict(type='mmhybrid.InfiniteVLVision', head_dim=8, window_size=3,
                       drop_path_rate=0.,
                       arch=dict(embed_dims=DIMS, schedule='WG/GG/WGGGWG/GG')),
    **{f'infvit-{name}': dict(type='mmhybrid.InfViT', img_size=64, drop_path_rate=0.,
                              out_indices=(0, 1, 2, 3),
                              arch=dict(VIT, depth=4, attn_types=name[0].upper()))
       for name in ('pure', 'linear')},
    'havit': HAVIT,
    'havit-zero': dict(HAVIT, history=dict(alpha=0.45, init='zero')),
}
for _plan in ('elfatt', 'local', 'global', 'effatt'):
    CASES[f'swin-{_plan}'] = dict(
        type='mmhybrid.SwinELFATT', attn=_plan, window_size=4,
        block_sizes=(8, 8, 16, 8), drop_path_rate=0.,
        arch=dict(embed_dims=16, depths=(2, 2, 2, 2), num_heads=(2, 2, 4, 4)))
    CASES[f'cswin-{_plan}'] = dict(
        type='mmhybrid.CSWin', attn=_plan, block_sizes=(8, 8, 16, 8),
        drop_path_rate=0.,
        arch=dict(embed_dims=16, depths=(1, 2, 2, 1), num_heads=(2, 2, 4, 4),
                  split_sizes=(1, 2, 2, 2)))
NAMES = sorted(CASES)


def build_case(name):
    """The tiny backbone ``name``, initialised, in eval mode."""
    import copy

    from mmhybrid.registry import build_model
    model = build_model(copy.deepcopy(CASES[name]))
    model.init_weights()
    model.eval()  # some backbones' train() returns None: not chained
    return model
