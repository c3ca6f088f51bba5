"""The package is the product (docs/design.md, Code layout): every module of
``mmhybrid/`` is reached from the package's entry points, and ``tools/`` and
``tests/`` import each other as packages, with no ``sys.path`` edits.

Reach is static: every import in a module, those inside functions included, plus
``<op package>.fused``, which ``ops/dispatch.py: fused_module`` imports on first use.
"""
import ast
import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# what users import (README, configs' ``type='mmhybrid.X'``), besides the registries'
# ``locations``
ENTRY_POINTS = ['mmhybrid', 'mmhybrid.diffusion', 'mmhybrid.utils']


def module_name(path):
    parts = path.relative_to(ROOT).with_suffix('').parts
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


MODULES = {module_name(p): p for p in (ROOT / 'mmhybrid').rglob('*.py')}


def imported_names(name):
    path = MODULES[name]
    package = name if path.name == '__init__.py' else name.rpartition('.')[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition('.')[0]
            module = node.module if not node.level else '.'.join(
                filter(None, (base, node.module)))
            yield module
            yield from (f'{module}.{alias.name}' for alias in node.names)
        elif isinstance(node, ast.Call) and getattr(node.func, 'id', '') == 'fused_module':
            yield f'{package}.fused'
        elif isinstance(node, ast.keyword) and node.arg == 'locations':
            yield from ast.literal_eval(node.value)


def reached_modules():
    reached, todo = set(), list(ENTRY_POINTS)
    while todo:
        name = todo.pop()
        if name in reached or name not in MODULES:
            continue
        reached.add(name)
        parents = name.split('.')
        todo += ['.'.join(parents[:i]) for i in range(1, len(parents))]
        todo += list(imported_names(name))
    return reached


def test_every_package_module_is_reached_from_an_entry_point():
    only_tools_and_tests = sorted(set(MODULES) - reached_modules())
    assert not only_tools_and_tests, (
        f'{only_tools_and_tests}: no entry point of mmhybrid imports them; code only '
        'tools or tests use belongs in tools/ or tests/')


def test_no_sys_path_edits():
    edit = re.compile(r'sys\.path(\.insert|\.append|\[\d\]\s*=)')
    files = sorted((ROOT / 'tools').rglob('*.py')) + sorted((ROOT / 'tests').rglob('*.py'))
    editing = [str(f.relative_to(ROOT)) for f in files if edit.search(f.read_text())]
    assert not editing, f'{editing}: import tools.x / tests.x instead'
    ini = configparser.ConfigParser()
    ini.read(ROOT / 'pytest.ini')
    assert 'pythonpath' not in ini['pytest']
