# tierlab: `make demo` (set up + run the built-in scenario), `make test` (set up + run the tests)
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.tierlab-installed

.PHONY: setup demo test bench docs clean

setup: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	@dpkg -s libaio-dev >/dev/null 2>&1 || { (apt-get update -qq && apt-get install -y -qq libaio-dev) || \
	  echo "warning: could not install libaio-dev (DeepSpeed's async_io needs it for NVMe offload)"; }
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[runner,test]'
	touch $(STAMP)

demo: setup
	$(VENV)/bin/tierlab simulate

test: setup
	$(PY) -m pytest -q

docs: setup
	$(PY) bench/render_docs.py

bench: setup
	for f in bench/bench_*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
