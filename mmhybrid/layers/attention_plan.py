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


def parse_attention_plan(plan, depths):
    """``plan[i][j]``, the attention type name of block ``j`` of stage ``i``.

    ``plan`` is a preset (a key of ``PRESET_PLANS``), a string with one
    comma-separated pattern per stage (``'E,E,GE,G'``) or a list with one entry
    per stage: a type name, a letter pattern or a list of type names.
    """
    names = list(ATTENTION_TYPES.values())
    plan = PRESET_PLANS.get(plan, plan) if isinstance(plan, str) else plan
    entries = plan.replace(' ', '').split(',') if isinstance(plan, str) else list(plan)
    if len(entries) != len(depths):
        what = (f'attention plan {plan!r} has {len(entries)} stages' if len(entries) > 1
                else f'unknown attention plan {plan!r}')
        raise ValueError(
            f'{what}, the backbone has {len(depths)}: use a preset ('
            f'{", ".join(map(repr, PRESET_PLANS))}) or one pattern per stage '
            f"({len(depths)}) separated by commas, e.g. 'E,E,GE,G' (letters: "
            f'{", ".join(f"{k} {v}" for k, v in ATTENTION_TYPES.items())})')
    expanded = []
    for entry, depth in zip(entries, depths):
        # 'elfatt' | 'GE' | ['global', 'elfatt'] -> ['global', 'elfatt', ...]
        pattern = list(entry) if not isinstance(entry, str) else (
            [entry] if entry in names else [ATTENTION_TYPES.get(c) for c in entry])
        if not pattern or not set(pattern) <= set(names):
            raise ValueError(f'unknown attention pattern {entry!r}: use letters '
                             f'{sorted(ATTENTION_TYPES)} or names {sorted(names)}')
        expanded.append([pattern[j % len(pattern)] for j in range(depth)])
    return expanded
