# The two commands of the README:
#   make demo   set everything up and run the example retraining DAG on an embedded local Spark
#   make test   set everything up and run the whole test suite (with the Keras environment, .venv-keras)
.PHONY: setup setup-keras setup-browser demo up down test clean

setup:
	bash scripts/setup.sh

setup-keras: setup
	bash scripts/setup_keras.sh

demo: setup
	bash scripts/demo.sh

# headless Chromium + chromedriver (apt) and Selenium, for the UI page's browser test; skipped when installed
setup-browser: setup
	bash scripts/setup_browser.sh

test: setup setup-keras setup-browser
	bash scripts/test.sh

clean:
	rm -rf .venv .venv-keras .venv-byo .airflow .pytest_cache
