# The two commands a fresh machine needs (see README):
#   make demo   set up .venv (or $MMHYBRID_VENV), then train + evaluate UPerNet/Mask R-CNN SoLA-T on toy data
#   make test   set up .venv (or $MMHYBRID_VENV), then run the test suite
PY := $(or $(MMHYBRID_VENV),.venv)/bin/python

.PHONY: setup demo test
setup:
	bash tools/setup_env.sh

demo: setup
	$(PY) tools/demo.py

# two pytest workers (pytest-xdist) of one thread each, for CI's two cores: 16 min
# serial, 9.5-10.5 with two workers on a 2-core host (docs/benchmarks.md)
TEST_WORKERS ?= 2
test: setup
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(PY) -m pytest -n $(TEST_WORKERS)
