"""``init_cfg=dict(type='Pretrained', ...)`` for mmhybrid backbones."""
import re
from collections import Counter

from mmengine.logging import print_log

from mmhybrid.utils.checkpoint import load_checkpoint
from .checkpoint_formats import convert_state_dict, extract_state_dict
from mmhybrid.ops.pos_embed import (resize_pos_embed, resize_rel_pos_bias_table,
                                    square_grid)

MIN_LOADED_FRACTION = 0.5  # with strict=None
_SHOWN = 3  # names shown per list in the summary


def _names(keys):
    """A short list that accounts for every key: up to ``_SHOWN`` names, else
    up to ``_SHOWN`` modules (``norm0, norm1, norm2``), else up to
    ``_SHOWN + 1`` patterns with counts (``stages.*.blocks.*.attn.lepe.weight
    x15``), else the first names."""
    if not keys:
        return ''
    shown = keys
    if len(keys) > _SHOWN and not any(' ' in k for k in keys):
        modules = list(dict.fromkeys(k.rsplit('.', 1)[0] for k in keys))
        patterns = Counter(re.sub(r'\d+', '*', k) for k in keys)
        if len(modules) <= _SHOWN:
            shown = modules
        elif len(patterns) <= _SHOWN + 1:
            return ' (' + ', '.join(p + (f' x{n}' if n > 1 else '')
                                    for p, n in patterns.items()) + ')'
    more = ', ...' if len(shown) > _SHOWN else ''
    return f' ({", ".join(shown[:_SHOWN])}{more})'


def _resize(state_dict, own, module):
    """Resize ``module``'s position embeddings (its ``pos_embed_keys``) and Swin
    bias tables in ``state_dict`` to ``own``'s shapes; returns notes."""
    owner = type(module).__name__
    num_extra_tokens = getattr(module, 'num_extra_tokens', 0)
    notes = []
    for key in getattr(module, 'pos_embed_keys', ('pos_embed', )):
        if key in state_dict and key in own and (state_dict[key].shape !=
                                                 own[key].shape):
            src_tokens = state_dict[key].shape[1] - num_extra_tokens
            dst_tokens = own[key].shape[1] - num_extra_tokens
            try:
                src, dst = square_grid(src_tokens), square_grid(dst_tokens)
            except ValueError:
                raise ValueError(
                    f'{owner}: cannot resize {key} from {src_tokens} to '
                    f'{dst_tokens} grid tokens (+{num_extra_tokens} extra): only '
                    'square grids are inferred from a checkpoint; build the model '
                    'with the checkpoint\'s img_size') from None
            if state_dict[key].shape[2] == own[key].shape[2]:
                notes.append(f'{key} resized from {src[0]}x{src[1]} to '
                             f'{dst[0]}x{dst[1]}')
                state_dict[key] = resize_pos_embed(state_dict[key], src, dst,
                                                   num_extra_tokens)
    tables = [k for k, v in state_dict.items()
              if k.endswith('relative_position_bias_table') and k in own
              and v.shape != own[k].shape and v.shape[1] == own[k].shape[1]]
    for key in tables:
        src = (square_grid(state_dict[key].shape[0])[0] + 1) // 2
        dst = (square_grid(own[key].shape[0])[0] + 1) // 2
        state_dict[key] = resize_rel_pos_bias_table(state_dict[key], dst)
    if tables:
        notes.append(f'{len(tables)} relative_position_bias_table resized from '
                     f'window {src} to {dst}')
    return notes


def _stem_width(arch):
    dims = arch.get('embed_dims')
    return dims[0] if isinstance(dims, (list, tuple)) else dims


def _other_arch(state_dict, own, module):
    """What to build for a checkpoint that mostly does not fit: the archs of
    ``module``'s class whose stem is as wide as the checkpoint's, or the width to
    give an arch dict when none is."""
    key = 'patch_embed.projection.weight'
    if key not in state_dict or key not in own or (
            state_dict[key].shape[0] == own[key].shape[0]):
        return 'a checkpoint of another arch or model? Pick the matching arch'
    width, owner = state_dict[key].shape[0], type(module).__name__
    zoo = getattr(module, 'arch_zoo', {})
    fits = [name for name, arch in zoo.items() if _stem_width(arch) == width]
    if fits:
        return (f'the checkpoint is {width} wide, the model {own[key].shape[0]}: '
                f'build {owner} with arch={" or ".join(map(repr, fits))}')
    return (f'the checkpoint is {width} wide, the model {own[key].shape[0]}, and no '
            f'{owner} arch ({", ".join(zoo)}) is: build it with an arch dict of '
            f'embed_dims={width} and the checkpoint\'s depth and heads')


def load_pretrained(module, checkpoint, prefix=None, map_location='cpu',
                    strict=None):
    """Load a bare backbone state dict or a full model checkpoint into ``module``.

    Keys are taken under ``prefix`` (default ``backbone.`` where present), the
    layout is detected and converted (:mod:`.checkpoint_formats`; heads and
    derived buffers of those layouts are skipped), the module's position
    embeddings (its ``pos_embed_keys``, default ``pos_embed``; square source
    grid, its ``num_extra_tokens`` leading tokens kept) and Swin
    relative-position-bias tables are resized to the module; another patch size
    is an error. ``strict``: True needs an exact match (mmengine's ``strict``);
    False loads whatever matches by name and shape; None (default) is False but
    fails unless ``MIN_LOADED_FRACTION`` of the model's tensors load (a
    checkpoint of another arch or model). One summary line goes to the log
    (``loaded M/N tensors from FILE``, format, dropped, missing / unexpected /
    shape-mismatched with names, skipped keys, resizes). Returns ``(missing,
    unexpected)``, shape-mismatched keys counted as missing.
    """
    owner = type(module).__name__
    try:
        raw = load_checkpoint(checkpoint, map_location=map_location)
    except FileNotFoundError as err:
        raise FileNotFoundError(
            f"{owner} init_cfg=dict(type='Pretrained', checkpoint={checkpoint!r}): "
            f'{err}; fix the path, or remove init_cfg to train from scratch'
        ) from err
    state_dict = extract_state_dict(raw)
    if not isinstance(state_dict, dict):
        raise ValueError(f'{checkpoint} holds a {type(state_dict).__name__}, not a '
                         'state dict or a checkpoint with one')
    if prefix is None and any(k.startswith('backbone.') for k in state_dict):
        prefix = 'backbone.'
    if prefix:
        if not prefix.endswith('.'):
            prefix += '.'
        heads = sorted({k.split('.')[0] + '.' for k in state_dict})
        state_dict = {k[len(prefix):]: v for k, v in state_dict.items()
                      if k.startswith(prefix)}
        if not state_dict:
            raise ValueError(f'no key of {checkpoint} starts with {prefix!r}; its '
                             f'keys start with {heads[:8]}: set init_cfg prefix=')
    state_dict, fmt, skipped, notes, account = convert_state_dict(state_dict, module)
    new = account.new if account else set()
    own = module.state_dict()
    key = 'patch_embed.projection.weight'
    if key in state_dict and key in own:
        src, dst = state_dict[key].shape, own[key].shape
        if src[:2] == dst[:2] and src[2:] != dst[2:]:
            raise ValueError(
                f'{owner}: the checkpoint\'s patch embedding has a {src[2]}x{src[3]} '
                f'kernel, the model {dst[2]}x{dst[3]}: build the model with '
                f'patch_size={src[2]} to load it (other patch sizes are not the '
                'same function)')
    notes += _resize(state_dict, own, module)

    mismatched = [f'{k} {tuple(v.shape)} vs {tuple(own[k].shape)}'
                  for k, v in state_dict.items()
                  if k in own and v.shape != own[k].shape]
    matched = {k: v for k, v in state_dict.items()
               if k in own and v.shape == own[k].shape}
    unexpected = [k for k in state_dict if k not in own]
    missing = [k for k in own if k not in state_dict and k not in new]
    loaded = len([k for k in matched if k not in new])
    dropped = len(unexpected) + len(mismatched) + (account.dropped if account else 0)
    source = f' ({fmt.name} format, converted)' if fmt else ''
    if dropped:
        total = account.teacher_tensors if account else len(state_dict)
        source += f', dropping {dropped} of its {total} backbone tensors'
    if skipped:
        notes.insert(0, f'skipped {len(skipped)} non-backbone{_names(skipped)}')
    if new:
        notes.insert(0, f'new {len(new)} (how each starts: "from softmax layers")')
    if account and account.summary:
        notes.append(f'from softmax layers: {account.summary}')
    summary = (f'{owner}: loaded {loaded}/{len(own)} tensors from '
               f'{checkpoint}{source}; missing {len(missing)}{_names(missing)}; '
               f'unexpected {len(unexpected)}{_names(unexpected)}; shape-mismatched '
               f'(checkpoint vs model) {len(mismatched)}{_names(mismatched)}'
               + ''.join(f'; {n}' for n in notes))
    partial = bool(missing or unexpected or mismatched or new)
    if strict and partial:
        raise ValueError(f'{summary}. strict=True needs an exact match: use '
                         'strict=False for a partial load')
    if strict is None and len(matched) < MIN_LOADED_FRACTION * len(own):
        raise ValueError(
            f'{summary}. Less than {MIN_LOADED_FRACTION:.0%} of the model matches: '
            f'{_other_arch(state_dict, own, module)}, or load the matching part '
            "anyway with init_cfg=dict(type='Pretrained', checkpoint=..., "
            'strict=False)')
    module.load_state_dict(matched, strict=False)
    print_log(summary, logger='current', level=30 if partial else 20)
    return missing + [m.split(' ')[0] for m in mismatched], unexpected
