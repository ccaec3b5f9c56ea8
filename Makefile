# trisk: `make up` brings the service up, `make test` runs the tests. Both install what they need into .venv.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: up test test-llm venv index lexicon detector lint openapi bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

up: venv
	./scripts/up.sh

test: venv
	./scripts/test.sh

# opt-in: tests against a real local model server (builds llama.cpp once per machine, outside the repository);
# serial: one model server in memory, not one per xdist worker
test-llm: venv
	TRISK_LOCAL_LLM_BUILD=1 TRISK_TEST_WORKERS=0 ./scripts/test.sh -m local_llm

index: venv
	$(PY) -m service.cli build-index

# the translation lexicon models/lexicon/pli-en.json.gz (about a minute on two cores)
lexicon: venv
	$(PY) -m service.cli build-lexicon

# the word-level error detector models/detector/pli-en.json (about 3 minutes on two cores; needs the lexicon)
detector: venv
	$(PY) -m service.cli build-detector

lint: venv
	$(VENV)/bin/ruff check service workers tests bench
	$(VENV)/bin/mypy

openapi: venv
	$(PY) -m service.cli openapi --out openapi/openapi.json

clean:
	rm -rf $(VENV) var
