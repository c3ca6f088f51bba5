"""Model complexity: parameters and multiply-adds (``tools/analysis/get_flops.py``,
the benchmark suites)."""
from .complexity import Complexity, stage_parts
from .flop_counter import (ATEN_RULES, FLOP_FORMULAS, FlopCount, FlopCounter,
                           count_flops, register_flops)
from .formulas import (WKV_MACS_PER_TOKEN_CHANNEL, delta_rule_macs,
                       historical_attention_macs, sliding_window_macs, wkv_macs)

__all__ = [
    'Complexity', 'stage_parts', 'ATEN_RULES', 'FLOP_FORMULAS', 'FlopCount',
    'FlopCounter', 'count_flops', 'register_flops', 'WKV_MACS_PER_TOKEN_CHANNEL',
    'wkv_macs', 'delta_rule_macs', 'sliding_window_macs', 'historical_attention_macs'
]
