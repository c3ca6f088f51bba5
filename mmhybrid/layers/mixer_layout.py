"""Which token mixer every layer of a backbone uses: the one grammar of ``mixers=``.

A layout has one entry per stage (one entry for the plain ViTs, InfViT and HAViT).
An entry is a list of registered mixer names (:data:`mmhybrid.registry.MIXERS`),
one per layer, or a shorthand: one name for every layer of the stage
(``'elfatt'``), or a string of letters, one per layer (``'LLSLLS'``). A string
with ``'/'`` between stages spells the whole layout in letters (SoLA-T's
``'LL/LL/LLSLLS/LS'``). Where a backbone's arch fixes the stage depths (Swin,
CSWin, InfViT, HAViT) a shorter entry repeats as a pattern (``'SE'`` over six
layers is ``SESESE``); where it does not (SoLA-Vision, InfiniteVL) the entries
are the stages.

The letters form one table, made from the ``letter`` each registered mixer
declares (:func:`mixer_letters`): no letter means two things.
"""
from mmhybrid.registry import MIXERS


def registered_mixers():
    """``{name: class}`` of every registered mixer, ours imported first."""
    MIXERS.import_from_location()
    return dict(MIXERS.module_dict)


def mixer_letters():
    """``{letter: name}``, from the ``letter`` class attribute of each mixer."""
    table = {}
    for name, cls in registered_mixers().items():
        letter = getattr(cls, 'letter', None)
        if letter is None:
            continue
        if not (isinstance(letter, str) and len(letter) == 1 and letter.isupper()):
            raise ValueError(f'mixer {name!r}: letter must be one upper-case '
                             f'character, got {letter!r}')
        if letter in table:
            raise ValueError(f'mixers {table[letter]!r} and {name!r} both claim the '
                             f'letter {letter!r}; give one of them another')
        table[letter] = name
    return table


def describe_mixers():
    """``"'softmax' (S), 'wkv' (L), ..."`` for messages."""
    letters = {name: letter for letter, name in mixer_letters().items()}
    return ', '.join(repr(name) + (f' ({letters[name]})' if name in letters else '')
                     for name in sorted(registered_mixers()))


def _stage_pattern(entry, names, letters, where):
    """One stage entry -> its list of mixer names."""
    if not len(entry):
        raise ValueError(f'{where} has no layer')
    if isinstance(entry, str):
        if entry in names:
            return [entry]
        if not entry.isupper() or not entry.isalpha():  # a misspelt name
            raise KeyError(f'unknown mixer {entry!r} in {where}; registered mixers: '
                           f'{describe_mixers()} (docs/contributing.md adds one)')
        entry = list(entry)
    pattern = [letters.get(n, n) if isinstance(n, str) and len(n) == 1 else n
               for n in entry]
    unknown = [n for n in pattern if n not in names]
    if unknown:
        raise KeyError(f'unknown mixer {unknown[0]!r} in {where}; registered mixers: '
                       f'{describe_mixers()} (docs/contributing.md adds one)')
    return pattern


def parse_mixers(layout, depths, owner):
    """``layout`` -> ``[[mixer name per layer] per stage]``.

    Args:
        layout (str | sequence): see the module docstring.
        depths (int | sequence[int]): the stage depths the arch fixes, or the
            number of stages when the layout gives the depths.
        owner (str): the backbone, for messages.
    """
    num_stages = depths if isinstance(depths, int) else len(depths)
    if isinstance(layout, str):
        if ',' in layout:
            raise ValueError(
                f"{owner}: mixers={layout!r} uses ',' between stages, ELFATT's attn= "
                f"spelling, where 'G' meant global softmax and 'L' the local window; "
                f"in mixers= those are 'S' and the local mixer's letter (and 'G' is "
                f"gated_deltanet, 'L' wkv): separate stages with '/', or pass attn=")
        # one name: every layer of every stage
        entries = ([layout] * num_stages if layout in registered_mixers() else
                   layout.split('/'))
    else:
        entries = list(layout)
        # a plain ViT's one stage may be given as its list of names
        if num_stages == 1 and len(entries) > 1 and all(isinstance(e, str)
                                                         for e in entries):
            entries = [entries]
    if len(entries) != num_stages:
        raise ValueError(f'{owner}: mixers={layout!r} has {len(entries)} stages, the '
                         f'backbone has {num_stages} (one entry per stage, '
                         f"'/' between stages in a string)")
    names, letters = registered_mixers(), mixer_letters()
    stages = []
    for i, entry in enumerate(entries):
        where = f'stage {i + 1} of {owner} mixers={layout!r}'
        pattern = _stage_pattern(entry, names, letters, where)
        if isinstance(depths, int):
            stages.append(pattern)
            continue
        if len(pattern) > depths[i]:
            raise ValueError(f'{where} names {len(pattern)} layers, the stage has '
                             f'{depths[i]}')
        stages.append([pattern[j % len(pattern)] for j in range(depths[i])])
    return stages


def letters_of(layout):
    """``[['wkv', 'softmax'], ...]`` -> ``'LS/...'`` where every mixer has a letter,
    for reprs and messages (else the names)."""
    inverse = {name: letter for letter, name in mixer_letters().items()}
    if all(name in inverse for stage in layout for name in stage):
        return '/'.join(''.join(inverse[n] for n in stage) for stage in layout)
    return str(layout)
