#!/bin/sh
# The image's install, run by the Dockerfile's builder stage and by tests/deploy/test_image_install.py, so that the
# test installs exactly as the image does: build every wheel (the project's and its dependencies', compiling where
# PyPI has no wheel) into WHEELS, then install the project into a new virtual environment VENV from those wheels
# alone (--no-index: what the venv holds is what was built, nothing fetched later).
# usage: scripts/image-install.sh SOURCE_DIR WHEELS VENV
set -eu
src=$1
wheels=$2
venv=$3
python3 -m venv "$venv"
mkdir -p "$wheels"
# an earlier run's project wheel carries the same version number: never let it stand in for the current source
rm -f "$wheels"/trisk-*.whl
"$venv/bin/pip" wheel --no-input --disable-pip-version-check --wheel-dir "$wheels" --find-links "$wheels" "$src"
"$venv/bin/pip" install --no-input --disable-pip-version-check --no-index --find-links "$wheels" trisk
