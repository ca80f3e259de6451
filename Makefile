# The two commands of the README:
#   make demo   set everything up and run the example retraining DAG on an embedded local Spark
#   make test   set everything up and run the whole test suite (with the Keras environment, .venv-keras)
#   make up / make down   start / stop a local deployment to watch the example DAGs in Airflow's UI
.PHONY: lint setup setup-keras setup-browser setup-mlflow-server demo up down test clean

setup:
	bash scripts/setup.sh

setup-keras: setup
	bash scripts/setup_keras.sh

demo: setup
	bash scripts/demo.sh

# a local deployment (Airflow api-server, scheduler, dag-processor, triggerer + Spark standalone and history server)
# on 127.0.0.1 serving example_dags/, in the background; `make down` stops all of it (docs/getting-started.md)
up: setup
	.venv/bin/python scripts/up.py up

down:
	.venv/bin/python scripts/up.py down

# headless Chromium + chromedriver (apt) and Selenium, for the UI page's browser test; skipped when installed
setup-browser: setup
	bash scripts/setup_browser.sh

# the MLflow tracking server the MLflow tests start (its own virtualenv: its pins are not Airflow's)
setup-mlflow-server:
	bash scripts/setup_mlflow_server.sh

# ruff (lint + format check) and mypy, configured in pyproject.toml; `make test` runs it before the suite
lint: setup
	bash scripts/lint.sh

# each set-up step is timed: the suite ends with a time table of the steps and of every test module
test:
	bash scripts/test_all.sh

clean:
	rm -rf .mypy_cache .ruff_cache .test-times .venv .venv-keras .venv-mlflow-server .airflow .airflow-up .pytest_cache
