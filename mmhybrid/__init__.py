"""mmhybrid: hybrid and linear-attention vision backbones for OpenMMLab.

Importing it registers our ops and models and changes nothing else (checked by
tests/utils/test_import_side_effects.py).
"""
from .version import __version__
from . import ops  # noqa: E402,F401
from . import models  # noqa: E402,F401
from .models.backbones import list_archs  # noqa: E402

__all__ = ['__version__', 'list_archs']
