"""The four-stage pyramid of SoLAVision / InfiniteVLVision (a layer schedule with
Hidden State Bridges) and SwinELFATT / CSWin (an attention plan): they differ in
stem, merges and mixers and run the same way: stem, then per stage an optional
merge and the blocks, a fresh :class:`~mmhybrid.layers.MixerState` per stage
(HAViT's history restarts), the bridges, and a norm per output."""
import torch.nn as nn

from mmhybrid.layers import MixerState
from mmhybrid.ops.streaming import tokens_to_map
from .base_backbone import BaseBackbone


class PyramidBackbone(BaseBackbone):
    """Forward, freezing and outputs of a stem + stages + merges pyramid.

    A subclass builds ``patch_embed`` (and the position embedding, if any) and its
    blocks, implements :meth:`stage_blocks` (the blocks of stage ``i``),
    :meth:`merge` (the module that merges into stage ``i``, None for stage 0) and
    :meth:`stage_modules`, and calls :meth:`build_outputs` last. Hidden State
    Bridges (SoLA Eq. 10) live in ``self.bridges``, keyed by their target
    ``"<stage>_<layer>"`` (1-based), their sources in ``self.bridge_sources``.
    """

    def __init__(self, num_stages, *args):
        super().__init__(num_stages, *args)
        self.num_stages = num_stages
        self.bridges = nn.ModuleDict()
        self.bridge_sources = {}

    def _bridges_of(self, stage):
        """Bridges whose target is in ``stage`` (1-based)."""
        return [b for k, b in self.bridges.items() if int(k.split('_')[0]) == stage]

    def stage_parts(self, index):
        return super().stage_parts(index) + self._bridges_of(index)

    def unused_parts(self):
        last = self.out_indices[-1]
        parts = []
        for i in range(last + 1, self.num_stages):
            parts += [self.stage_blocks(i), self.merge(i), *self._bridges_of(i + 1)]
        return parts

    def forward(self, x):
        x, hw = self.embed(x)
        hidden = {}  # bridge source (stage, layer) -> (hidden state, hw)
        sources = set(self.bridge_sources.values())
        outs = []
        for i in range(self.out_indices[-1] + 1):
            if i > 0:
                x, hw = self.merge(i)(x, hw)
            state = MixerState()
            for j, block in enumerate(self.stage_blocks(i)):
                key = f'{i + 1}_{j + 1}'
                if key in self.bridges:
                    source, source_hw = hidden[self.bridge_sources[key]]
                    x = self.run_layer(self.bridges[key], x, hw, source, source_hw)
                x, state = self.run_layer(block, x, hw, state)
                if (i + 1, j + 1) in sources:
                    hidden[(i + 1, j + 1)] = (state.hidden, hw)
            if i in self.out_indices:
                outs.append(tokens_to_map(getattr(self, f'norm{i}')(x), hw).contiguous())
        return tuple(outs)
