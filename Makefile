# The two commands a fresh machine needs (see README):
#   make demo   set up .venv (or $MMHYBRID_VENV), then train + evaluate UPerNet/Mask R-CNN SoLA-T on toy data
#   make test   set up .venv (or $MMHYBRID_VENV), then run the test suite
PY := $(or $(MMHYBRID_VENV),.venv)/bin/python

.PHONY: setup demo test
setup:
	bash tools/setup_env.sh

demo: setup
	$(PY) tools/demo.py

test: setup
	$(PY) -m pytest
