"""Model complexity: parameters and multiply-adds (``tools/analysis/get_flops.py``,
the benchmark suites)."""
from .complexity import Complexity, stage_parts
from .flop_counter import ATEN_RULES, FlopCount, FlopCounter, count_flops

__all__ = ['Complexity', 'stage_parts', 'ATEN_RULES', 'FlopCount', 'FlopCounter',
           'count_flops']
