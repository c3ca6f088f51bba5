"""``init_cfg=dict(type='Pretrained', ...)`` for mmhybrid backbones."""
from mmengine.logging import print_log

from mmhybrid.utils.checkpoint import load_checkpoint
from .pos_embed import resize_pos_embed, square_grid

# with strict=None, at least this fraction of the model's tensors must load
MIN_LOADED_FRACTION = 0.5
_SHOWN = 3  # names shown per list in the summary


def _extract_state_dict(checkpoint):
    for key in ('state_dict', 'model', 'module'):
        if isinstance(checkpoint, dict) and key in checkpoint and isinstance(
                checkpoint[key], dict):
            return checkpoint[key]
    return checkpoint


def _first(names):
    if not names:
        return ''
    more = ', ...' if len(names) > _SHOWN else ''
    return f' ({", ".join(names[:_SHOWN])}{more})'


def load_pretrained(module, checkpoint, prefix=None, map_location='cpu',
                    pos_embed_keys=('pos_embed', ), num_extra_tokens=0,
                    converter=None, strict=None, logger='current'):
    """Load a bare backbone state dict or a full model checkpoint into ``module``.

    * ``prefix``: keep only keys starting with it (stripped). When None and every
      key of interest carries ``backbone.`` (an mmpretrain classifier, an mmseg or
      mmdet model), that prefix is used.
    * ``converter``: optional ``fn(state_dict) -> state_dict`` from a public layout.
    * position embeddings named in ``pos_embed_keys`` are resized to the module's
      grid (square source grid assumed, extra tokens kept).
    * ``strict``: True: every tensor of the model must load and none may be left
      over (mmengine's ``strict``); False: a partial load, whatever matches by
      name and shape; None (default): like False, but fail unless at least
      ``MIN_LOADED_FRACTION`` of the model's tensors load (a checkpoint of
      another arch or model).

    One summary line (loaded / missing / unexpected / shape-mismatched) goes to
    the logger. Returns ``(missing, unexpected)``; shape-mismatched keys are
    counted as missing.
    """
    owner = type(module).__name__
    try:
        raw = load_checkpoint(checkpoint, map_location=map_location)
    except FileNotFoundError as err:
        raise FileNotFoundError(
            f"{owner} init_cfg=dict(type='Pretrained', checkpoint={checkpoint!r}): "
            f'{err}; fix the path, or remove init_cfg to train from scratch'
        ) from err
    state_dict = _extract_state_dict(raw)
    if not isinstance(state_dict, dict):
        raise ValueError(f'{checkpoint} holds a {type(state_dict).__name__}, not a '
                         'state dict or a checkpoint with one')
    if prefix is None and any(k.startswith('backbone.') for k in state_dict):
        prefix = 'backbone.'
    if prefix:
        if not prefix.endswith('.'):
            prefix += '.'
        heads = sorted({k.split('.')[0] + '.' for k in state_dict})
        state_dict = {
            k[len(prefix):]: v
            for k, v in state_dict.items() if k.startswith(prefix)
        }
        if not state_dict:
            raise ValueError(f'no key of {checkpoint} starts with {prefix!r}; its '
                             f'keys start with {heads[:8]}: set init_cfg prefix=')
    if converter is not None:
        state_dict = converter(state_dict)
    own = module.state_dict()
    notes = []
    for key in pos_embed_keys:
        if key in state_dict and key in own and (state_dict[key].shape !=
                                                 own[key].shape):
            src = square_grid(state_dict[key].shape[1] - num_extra_tokens)
            dst = square_grid(own[key].shape[1] - num_extra_tokens)
            notes.append(f'{key} resized from {src} to {dst}')
            state_dict[key] = resize_pos_embed(state_dict[key], src, dst,
                                               num_extra_tokens)

    mismatched = [f'{k} {tuple(v.shape)} vs {tuple(own[k].shape)}'
                  for k, v in state_dict.items()
                  if k in own and v.shape != own[k].shape]
    matched = {k: v for k, v in state_dict.items()
               if k in own and v.shape == own[k].shape}
    unexpected = [k for k in state_dict if k not in own]
    missing = [k for k in own if k not in state_dict]
    summary = (f'{owner}: loaded {len(matched)}/{len(own)} tensors from {checkpoint}'
               f'; missing {len(missing)}{_first(missing)}; unexpected '
               f'{len(unexpected)}{_first(unexpected)}; shape-mismatched (checkpoint '
               f'vs model) {len(mismatched)}{_first(mismatched)}'
               + ''.join(f'; {n}' for n in notes))
    partial = bool(missing or unexpected or mismatched)
    if strict and partial:
        raise ValueError(f'{summary}. strict=True needs an exact match: use '
                         'strict=False for a partial load')
    if strict is None and len(matched) < MIN_LOADED_FRACTION * len(own):
        raise ValueError(
            f'{summary}. Less than {MIN_LOADED_FRACTION:.0%} of the model matches: '
            'a checkpoint of another arch or model? Pick the matching arch, or '
            "load the matching part anyway with init_cfg=dict(type='Pretrained', "
            'checkpoint=..., strict=False)')
    module.load_state_dict(matched, strict=False)
    print_log(summary, logger=logger, level=30 if partial else 20)
    return missing + [m.split(' ')[0] for m in mismatched], unexpected
