# The two commands of the README:
#   make demo   set everything up and run the example retraining DAG on an embedded local Spark
#   make test   set everything up and run the whole test suite (with the Keras environment, .venv-keras)
.PHONY: setup setup-keras demo test clean

setup:
	bash scripts/setup.sh

setup-keras: setup
	bash scripts/setup_keras.sh

demo: setup
	bash scripts/demo.sh

test: setup setup-keras
	bash scripts/test.sh

clean:
	rm -rf .venv .venv-keras .venv-byo .airflow .pytest_cache
