#!/usr/bin/env bash
# The browser for the workbench's browser tests: Debian's chromium and chromium-driver, installed when missing
# (quick when they are there). Playwright drives this chromium; it never downloads a browser of its own.
set -euo pipefail
# DejaVu: a font with every Pali diacritic (ā ī ū ṃ ṅ ñ ṭ ḍ ṇ ḷ), so screenshots show what a reviewer reads
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] && [ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "browser: /usr/bin/chromium is missing and there is no apt-get to install it; the browser tests will fail" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
# the package lists may be old or absent on a fresh machine: refresh them only when chromium is not found in them
if ! apt-cache show chromium >/dev/null 2>&1; then
  $SUDO apt-get -o DPkg::Lock::Timeout=300 update -qq
fi
$SUDO apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >/dev/null
/usr/bin/chromium --version
