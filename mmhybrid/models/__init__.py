from . import backbones  # noqa: F401
from .backbones import *  # noqa: F401,F403
