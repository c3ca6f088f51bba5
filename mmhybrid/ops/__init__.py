"""Functional ops (no parameters). Each op has a naive reference for tests."""
from .token_shift import quad_token_shift
from .wkv import bi_wkv, register_wkv_backend

__all__ = ['bi_wkv', 'register_wkv_backend', 'quad_token_shift']
