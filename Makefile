# The two commands a fresh machine needs (see README):
#   make demo   set up .venv (or $MMHYBRID_VENV), then train + evaluate UPerNet/Mask R-CNN SoLA-T on toy data
#   make test   set up .venv (or $MMHYBRID_VENV), then run the test suite
PY := $(or $(MMHYBRID_VENV),.venv)/bin/python

.PHONY: setup demo test
setup:
	bash tools/setup_env.sh

demo: setup
	$(PY) tools/demo.py

# two pytest workers (pytest-xdist) of one thread each, for CI's two cores: 5 to 10.5
# min on the 2-core hosts we measured (docs/benchmarks.md, "The two commands")
TEST_WORKERS ?= 2
test: setup
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(PY) -m pytest -n $(TEST_WORKERS)
