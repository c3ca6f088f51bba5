"""Which student layer learns from which teacher layer (InfiniteVL Sec. 3.3).

Stage I (Eq. 3) pairs every student layer with the teacher layer whose input it
receives. Backbones keep their :class:`~mmhybrid.layers.Block` s in different
places; :func:`blocks_per_stage` lists them for all of ours, and
:func:`pair_layers` pairs two such lists stage by stage.
"""


def blocks_per_stage(backbone):
    """The blocks of ``backbone`` as a list per stage: pyramids (SoLAVision,
    InfiniteVLVision, SwinELFATT, CSWin) through ``stage_blocks(i)``, plain ViTs
    (InfViT, HAViT) as one stage of ``layers``."""
    if hasattr(backbone, 'stage_blocks'):
        return [list(backbone.stage_blocks(i)) for i in range(backbone.num_stages)]
    if hasattr(backbone, 'layers'):
        return [list(backbone.layers)]
    raise TypeError(f'{type(backbone).__name__} is neither a pyramid (stage_blocks) '
                    'nor a plain ViT (layers): cannot list its blocks')


def block_width(block):
    """Channels of a block (its first pre-norm's)."""
    return block.norm1.weight.shape[0]


def teacher_index(j, n_student, n_teacher):
    """Teacher block of student block ``j`` in a stage of ``n_student`` student and
    ``n_teacher`` teacher blocks: spread evenly, first and last kept
    (``round(j * (n_t - 1) / (n_s - 1))``); equal lengths pair one to one."""
    if n_student == 1:
        return 0
    return round(j * (n_teacher - 1) / (n_student - 1))


def pair_layers(teacher_stages, student_stages):
    """``[((i, j), (i, k)), ...]``: student stage ``i`` block ``j`` learns from
    teacher stage ``i`` block ``k`` (0-based), for lists of blocks per stage
    (:func:`blocks_per_stage`). A different number of stages, a student stage
    with more blocks than the teacher's, or different widths is a ValueError
    naming the stage (1-based) and the numbers."""
    if len(teacher_stages) != len(student_stages):
        raise ValueError(f'the student has {len(student_stages)} stages, the teacher '
                         f'{len(teacher_stages)}: layer-wise distillation pairs '
                         'stages one to one')
    pairs = []
    for i, (teacher, student) in enumerate(zip(teacher_stages, student_stages)):
        n_t, n_s = len(teacher), len(student)
        if n_s > n_t:
            raise ValueError(f'stage {i + 1}: the student has {n_s} layers, the '
                             f'teacher {n_t}; a student stage may be as deep as the '
                             "teacher's or shallower, not deeper")
        w_t, w_s = block_width(teacher[0]), block_width(student[0])
        if w_t != w_s:
            raise ValueError(f'stage {i + 1}: the student is {w_s} channels wide, '
                             f'the teacher {w_t}; the student takes the teacher\'s '
                             'tokens, so widths must match')
        pairs += [((i, j), (i, teacher_index(j, n_s, n_t))) for j in range(n_s)]
    return pairs
