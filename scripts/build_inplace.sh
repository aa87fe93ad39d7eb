#!/usr/bin/env bash
# Rebuild hopmem/_kernel in place without disturbing running processes: build
# into a scratch folder, then rename the new .so over the old one (atomic).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
tmp=$(mktemp -d)
"$PY" setup.py -q build_ext --build-lib "$tmp" --build-temp "$tmp/tmp" >/dev/null
so=$(ls "$tmp"/hopmem/_kernel*.so)
cp "$so" "hopmem/.$(basename "$so").new"
mv -f "hopmem/.$(basename "$so").new" "hopmem/$(basename "$so")"
rm -rf "$tmp"
echo "built hopmem/$(basename "$so")"
