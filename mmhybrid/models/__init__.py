from . import backbones  # noqa: F401
from .backbones import *  # noqa: F401,F403
from . import necks  # noqa: F401
from .necks import *  # noqa: F401,F403
from . import distillers  # noqa: F401
from .distillers import *  # noqa: F401,F403
