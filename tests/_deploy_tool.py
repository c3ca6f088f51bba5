"""``tools/deploy/export.py`` loaded as a module (tools/deploy is not a package, put on
``sys.path`` here, with its siblings: ``cases``, ``exportable``)."""
import importlib.util
import sys
from pathlib import Path

DEPLOY = Path(__file__).resolve().parents[1] / 'tools' / 'deploy'
sys.path.insert(0, str(DEPLOY))


def load_export_tool():
    spec = importlib.util.spec_from_file_location('_deploy_export', DEPLOY / 'export.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

