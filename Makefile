# The two commands a fresh machine needs (see README):
#   make demo   set up .venv, then train + evaluate UPerNet/Mask R-CNN SoLA-T on toy data
#   make test   set up .venv, then run the test suite
PY := .venv/bin/python

.PHONY: setup demo test
setup:
	bash tools/setup_env.sh

demo: setup
	$(PY) tools/demo.py

test: setup
	$(PY) -m pytest
