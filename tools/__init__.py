"""The repository's tools: scripts run as ``python tools/<name>.py`` (or ``python -m
tools.<name>``) and the library they and the tests share (benchmarks, deploy checks,
FLOP counting, toy data, tiny backbone configs). Installed beside ``mmhybrid`` by
setup.py, not part of it (docs/design.md, Code layout)."""
