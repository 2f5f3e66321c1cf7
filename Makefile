# Quick start: `make demo` and `make test` each create .venv if needed and install what they use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# torch 2.14.1 with torchvision 0.29.1 (the CUDA build, ~5.5 GB; it runs on CPU and brings Triton):
# torchvision wheels import only beside the torch build they were made for, and the vision examples
# are tested. Override with e.g. `make TORCH_SPEC="torch torchvision" test`.
TORCH_SPEC ?= torch==2.14.1 torchvision==0.29.1

.PHONY: demo test docs bench lint clean gpu-wheels tritons triton36

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q $(TORCH_SPEC) || $(PY) -m pip install -q torch torchvision
	$(PY) -m pip install -q -e ".[dev,examples,bench,docs,hf,export]"
	$(PY) -c "import structtorch._extension as e; raise SystemExit(e.main())"  # build the kernels now
	touch $@

demo: $(VENV)/.installed
	$(PY) examples/gene_structure.py

# pytest-xdist: the suite on PYTEST_WORKERS processes (two cores: 7.4 min against 12 on one)
PYTEST_WORKERS ?= 2
test: $(VENV)/.installed
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup

# the API reference from the docstrings (docs/_build/html); warnings are errors
docs: $(VENV)/.installed
	$(PY) -m sphinx -E -W --keep-going -q -b html docs docs/_build/html

bench: $(VENV)/.installed
	$(PY) benchmarks/chain.py && $(PY) benchmarks/hamming.py && $(PY) benchmarks/semimarkov.py && $(PY) benchmarks/trees.py

# Python 3.12 wheels of the GPU benchmark's peers, carried to a GPU machine without network
gpu-wheels: $(VENV)/.installed
	$(PY) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d .gpu-wheels \
		torch-struct pytorch-crf flash-semicrf

# every Triton kernel compiled ahead of time for sm_90 with each Triton of TRITON_VERSIONS (3.6: the
# GPU machine's; 3.9: the newest; CI's test compiles with the Triton the venv has, 3.8), each
# installed beside the venv in .triton-<version>, not into it. `make tritons TRITON_VERSIONS=3.9.0`
# for one; `make triton36` is the first alone. Triton 3.6's interpreter indexes with one-element
# arrays, which NumPy 2.4 refuses: its folder gets NumPy 2.3 too, so that the interpreted tests run
# with it (PYTHONPATH=.triton-3.6.0 pytest ...).
TRITON_VERSIONS ?= 3.6.0 3.9.0
tritons: $(VENV)/.installed
	for v in $(TRITON_VERSIONS); do \
		$(PY) -m pip install -q --no-deps --target .triton-$$v triton==$$v && \
		{ [ $$v != 3.6.0 ] || $(PY) -m pip install -q --no-deps --target .triton-$$v "numpy<2.4"; } && \
		env -u TRITON_INTERPRET PYTHONPATH=.triton-$$v TRITON_CACHE_DIR=.triton-$$v/cache \
			$(PY) tests/compile_kernels.py || exit 1; \
	done

triton36:
	$(MAKE) tritons TRITON_VERSIONS=3.6.0

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check structtorch tests examples benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .triton36 .triton-*
