#!/usr/bin/env bash
# The real browser of the UI page's tests (tests/e2e/test_progress_page.py): Debian's headless Chromium and its
# WebDriver (apt packages chromium, chromium-driver), and Selenium in ./.venv (the dev extra installs it; added here
# when the environment predates it). Idempotent: nothing to do when all three are there.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-$PWD/.venv}

if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  command -v apt-get >/dev/null || { echo "setup-browser: no apt-get: install Chromium and chromedriver yourself" >&2; exit 1; }
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup-browser: apt-get needs root (or sudo)" >&2; exit 1; }
    SUDO="sudo"
  fi
  echo "setup-browser: installing chromium and chromium-driver (apt-get) ..."
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
fi
if ! "$VENV/bin/python" -c 'import selenium' 2>/dev/null; then
  "$VENV/bin/python" -m pip --disable-pip-version-check install -q -c requirements/pins.txt "selenium>=4.20"
fi
echo "setup-browser: ok: $(chromium --version 2>/dev/null | head -1), $(chromedriver --version | head -1)"
