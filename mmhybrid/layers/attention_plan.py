"""Per-stage attention plans: which attention every block of a backbone uses.

A plan has one entry per stage; an entry is a pattern of attention types repeated
over the stage's blocks. Letters: ``E`` ELFATT, ``F`` EFFATT, ``G`` global
(vanilla softmax), ``L`` the backbone's own local attention (Swin shifted windows,
CSWin cross-shaped windows). ``'E,E,GE,G'`` therefore means ELFATT in stages 1-2,
stage 3 alternating vanilla/ELFATT starting with vanilla, stage 4 vanilla
(the paper's plan, Appendix E).
"""
ATTENTION_TYPES = {'E': 'elfatt', 'F': 'effatt', 'G': 'global', 'L': 'local'}

PRESET_PLANS = {
    # Appendix E: ELFATT in levels 1-2, level 3 VaniATT-ELFATT-..., level 4 VaniATT.
    'elfatt': 'E,E,GE,G',
    # Table 7: c1 = c turns CSWin-T-ELFATT into the Table 1 EFFATT row (same
    # accuracy and FPS), i.e. EFFATT models keep ELFATT's plan.
    'effatt': 'F,F,GF,G',
    'global': 'G,G,G,G',
    'local': 'L,L,L,L',
}


def _plan_help(num_stages):
    letters = ', '.join(f'{k} {v}' for k, v in ATTENTION_TYPES.items())
    return (f'use a preset ({", ".join(repr(p) for p in PRESET_PLANS)}) or one '
            f'pattern per stage ({num_stages}) separated by commas, e.g. '
            f"'E,E,GE,G' (letters: {letters})")


def _stage_pattern(entry):
    """'elfatt' | 'GE' | ['global', 'elfatt'] -> ('global', 'elfatt', ...)."""
    if isinstance(entry, str):
        if entry in ATTENTION_TYPES.values():
            return (entry, )
        if entry and set(entry) <= set(ATTENTION_TYPES):
            return tuple(ATTENTION_TYPES[c] for c in entry)
        raise ValueError(f'unknown attention pattern {entry!r}: use letters '
                         f'{sorted(ATTENTION_TYPES)} or names '
                         f'{sorted(ATTENTION_TYPES.values())}')
    names = tuple(entry)
    for name in names:
        if name not in ATTENTION_TYPES.values():
            raise ValueError(f'unknown attention type {name!r}; use '
                             f'{sorted(ATTENTION_TYPES.values())}')
    if not names:
        raise ValueError('empty attention pattern')
    return names


def parse_attention_plan(plan, depths):
    """Expand a plan to one attention type name per block.

    Args:
        plan (str | list): a preset (``'elfatt'``, ``'effatt'``, ``'global'``,
            ``'local'``), a compact string with one comma-separated pattern per
            stage (``'E,E,GE,G'``), or a list with one entry per stage, each a
            type name, a letter pattern, or a list of type names.
        depths (list[int]): blocks per stage.
    Returns:
        list[list[str]]: ``plan[i][j]`` is the type of block ``j`` of stage ``i``.
    """
    if isinstance(plan, str) and plan not in PRESET_PLANS and ',' not in plan:
        raise ValueError(f'unknown attention plan {plan!r}: '
                         f'{_plan_help(len(depths))}')
    plan = PRESET_PLANS.get(plan, plan) if isinstance(plan, str) else plan
    entries = plan.replace(' ', '').split(',') if isinstance(plan, str) else list(plan)
    if len(entries) != len(depths):
        raise ValueError(f'attention plan {plan!r} has {len(entries)} stages, '
                         f'the backbone has {len(depths)}: {_plan_help(len(depths))}')
    expanded = []
    for entry, depth in zip(entries, depths):
        pattern = _stage_pattern(entry)
        expanded.append([pattern[j % len(pattern)] for j in range(depth)])
    return expanded
