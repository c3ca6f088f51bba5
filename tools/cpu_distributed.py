"""Multi-process training on machines without CUDA (torchrun + gloo).

mmengine 0.10.7 assumes GPUs once a launcher is given (``init_dist`` sets a CUDA
device, DDP and FSDP get ``LOCAL_RANK`` as device, configs ask for NCCL and
SyncBN). Without CUDA, :func:`setup_cpu_distributed` (``build_runner`` of
tools/_common.py) starts a gloo group from torchrun's environment, picks the CPU
wrappers below and averages BN statistics after every iteration.
"""
import torch
import torch.distributed as dist
from mmengine.dist import all_reduce_params
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.model import (MMDistributedDataParallel,
                            MMFullyShardedDataParallel, revert_sync_batchnorm)
from mmengine.registry import HOOKS, MODEL_WRAPPERS


@MODEL_WRAPPERS.register_module()
class CPUDistributedDataParallel(MMDistributedDataParallel):
    """``MMDistributedDataParallel`` of a CPU model: no ``device_ids`` (DDP refuses
    them for CPU modules); SyncBN (GPU only) becomes BN, whose statistics
    :class:`SyncBuffersEveryIterHook` keeps equal across processes."""

    def __init__(self, module, device_ids=None, **kwargs):
        super().__init__(module=revert_sync_batchnorm(module), device_ids=None,
                         **kwargs)


@MODEL_WRAPPERS.register_module()
class CPUFullyShardedDataParallel(MMFullyShardedDataParallel):
    """``MMFullyShardedDataParallel`` (FSDPStrategy) of a CPU model (``device_id``
    'cpu', not ``LOCAL_RANK``), SyncBN as in :class:`CPUDistributedDataParallel`."""

    def __init__(self, module, device_id=None, **kwargs):
        super().__init__(module=revert_sync_batchnorm(module), device_id='cpu',
                         **kwargs)


@HOOKS.register_module()
class SyncBuffersEveryIterHook(Hook):
    """Average floating-point buffers (BN statistics) over the processes after
    every training iteration, so that all validate with, and rank 0 saves, the
    same statistics (SyncBN's stand-in on CPU processes)."""
    priority = 'NORMAL'  # before CheckpointHook (VERY_LOW)

    def after_train_iter(self, runner, batch_idx, data_batch=None,
                         outputs=None):
        buffers = [b for b in runner.model.buffers() if b.is_floating_point()]
        if buffers and dist.is_initialized():
            all_reduce_params(buffers, op='mean')


def setup_cpu_distributed(cfg):
    """Make ``cfg`` (launcher set by ``load_config``) train on CPU processes."""
    launcher = cfg.get('launcher', 'none')
    if launcher == 'none' or torch.cuda.is_available():
        return cfg
    if launcher != 'pytorch':
        raise RuntimeError(
            f'--launcher {launcher} needs GPUs with mmengine 0.10.7; on a machine '
            'without CUDA start the processes with torchrun (tools/dist_train.sh, '
            '--launcher pytorch)')
    # ConfigDict.setdefault stores a converted copy: read back what it stored
    cfg.setdefault('env_cfg', {})
    cfg.env_cfg.setdefault('dist_cfg', {})
    dist_cfg = cfg.env_cfg.dist_cfg
    if dist_cfg.get('backend', 'gloo') != 'gloo':
        print_log(f'no CUDA: distributed backend gloo instead of '
                  f'{dist_cfg["backend"]}', logger='current')
    dist_cfg['backend'] = 'gloo'
    if not dist.is_initialized():
        dist.init_process_group(**dist_cfg.to_dict())
    cfg.custom_hooks = [*cfg.get('custom_hooks', []),
                        dict(type='SyncBuffersEveryIterHook')]
    strategy = cfg.get('strategy')
    if strategy is not None:  # FlexibleRunner
        if strategy.get('type') == 'FSDPStrategy':
            strategy.model_wrapper = _cpu_wrapper(
                strategy.get('model_wrapper'), 'MMFullyShardedDataParallel',
                'CPUFullyShardedDataParallel', {})
        return cfg
    cfg.model_wrapper_cfg = _cpu_wrapper(
        cfg.get('model_wrapper_cfg'), 'MMDistributedDataParallel',
        'CPUDistributedDataParallel', dict(
            broadcast_buffers=False,
            find_unused_parameters=cfg.get('find_unused_parameters', False)))
    return cfg


def _cpu_wrapper(wrapper, default, cpu_type, defaults):
    """``wrapper`` (a config or None) with ``cpu_type`` for ``default``."""
    if wrapper is None:
        return dict(type=cpu_type, **defaults)
    if wrapper.get('type', default) == default:
        wrapper['type'] = cpu_type
    return wrapper
