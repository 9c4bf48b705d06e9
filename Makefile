# The two commands a newcomer needs (see README):
#   make demo   run the whole pipeline on the bundled sample node (no hardware needed)
#   make test   install what the tests need, build the real-peer harness, run every test
.PHONY: demo test lint bench

demo:
	@scripts/bootstrap --demo
	@scripts/demo

# Everything runs with the project's virtualenv (.venv, made by scripts/bootstrap) first on
# PATH: its python3 and the console scripts (dt-labeller, ..., lint-imports, ruff).
export PATH := $(CURDIR)/.venv/bin:$(PATH)

test:
	@scripts/bootstrap --all
	python3 -m pytest

lint:
	ruff check . && ruff format --check .

bench:
	@scripts/bootstrap --all
	for b in benchmarks/bench_*.py; do echo "== $$b"; python3 $$b || exit 1; done
