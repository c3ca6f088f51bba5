"""``init_cfg=dict(type='Pretrained', ...)`` for mmhybrid backbones."""
from mmengine.logging import print_log
from mmengine.runner.checkpoint import CheckpointLoader

from .pos_embed import resize_pos_embed, square_grid


def _extract_state_dict(checkpoint):
    for key in ('state_dict', 'model', 'module'):
        if isinstance(checkpoint, dict) and key in checkpoint and isinstance(
                checkpoint[key], dict):
            return checkpoint[key]
    return checkpoint


def load_pretrained(module, checkpoint, prefix=None, map_location='cpu',
                    pos_embed_keys=('pos_embed', ), num_extra_tokens=0,
                    converter=None, logger='current'):
    """Load a bare backbone state dict or a full model checkpoint into ``module``.

    * ``prefix``: keep only keys starting with it (stripped). When None and every
      key of interest carries ``backbone.`` (an mmpretrain classifier, an mmseg or
      mmdet model), that prefix is used.
    * ``converter``: optional ``fn(state_dict) -> state_dict`` from a public layout.
    * position embeddings named in ``pos_embed_keys`` are resized to the module's
      grid (square source grid assumed, extra tokens kept).

    Missing and unexpected keys are reported through the logger and returned.
    """
    state_dict = _extract_state_dict(
        CheckpointLoader.load_checkpoint(checkpoint, map_location=map_location))
    if prefix is None and any(k.startswith('backbone.') for k in state_dict):
        prefix = 'backbone.'
    if prefix:
        if not prefix.endswith('.'):
            prefix += '.'
        state_dict = {
            k[len(prefix):]: v
            for k, v in state_dict.items() if k.startswith(prefix)
        }
        if not state_dict:
            raise ValueError(f'no key of {checkpoint} starts with {prefix!r}')
    if converter is not None:
        state_dict = converter(state_dict)

    own = module.state_dict()
    for key in pos_embed_keys:
        if key in state_dict and key in own and (state_dict[key].shape !=
                                                 own[key].shape):
            src = square_grid(state_dict[key].shape[1] - num_extra_tokens)
            dst = square_grid(own[key].shape[1] - num_extra_tokens)
            print_log(f'resize {key} from {src} to {dst}', logger=logger)
            state_dict[key] = resize_pos_embed(state_dict[key], src, dst,
                                               num_extra_tokens)

    mismatched = [
        k for k, v in state_dict.items() if k in own and v.shape != own[k].shape
    ]
    for k in mismatched:
        print_log(f'skip {k}: checkpoint shape {tuple(state_dict[k].shape)} vs '
                  f'model {tuple(own[k].shape)}', logger=logger, level=30)
        del state_dict[k]
    result = module.load_state_dict(state_dict, strict=False)
    missing = list(result.missing_keys) + mismatched
    unexpected = list(result.unexpected_keys)
    print_log(
        f'loaded {len(state_dict)} tensors from {checkpoint}; '
        f'missing keys ({len(missing)}): {missing}; '
        f'unexpected keys ({len(unexpected)}): {unexpected}',
        logger=logger)
    return missing, unexpected
