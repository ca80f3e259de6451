# The two commands of the README:
#   make demo   set everything up and run the example retraining DAG on an embedded local Spark
#   make test   set everything up and run the whole test suite
.PHONY: setup demo test clean

setup:
	bash scripts/setup.sh

demo: setup
	bash scripts/demo.sh

test: setup
	bash scripts/test.sh

clean:
	rm -rf .venv .venv-byo .airflow .pytest_cache
