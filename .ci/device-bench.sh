#!/bin/bash
# bench/webgpu.py (and the webgpu plugin's tests) on a lent GPU machine with no network.
#
# On the dev machine, once (the wheels and the Vulkan loader travel as `carry: [".whl", ".gl"]`):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform any -d .whl \
#     wgpu==0.32.0 rendercanvas==2.7.2 cffi==2.0.0 pycparser==3.0 pluggy pytest iniconfig packaging pygments
#   mkdir -p .gl && (cd .gl && apt-get download libvulkan1)
# Then on the device: bash .ci/device-bench.sh [bench args]; the output lands in $OUT if set.
# The device copies the session's checkout: run this from a checkout that has the webgpu plugin.
set -euo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
PY=${PY:-/opt/torch/.venv/bin/python3}
[ -x "$PY" ] || PY=python3
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 XDG_RUNTIME_DIR=/tmp
OUT=${OUT:-/tmp}
"$PY" -c "import wgpu; [print(a.info['backend_type'], a.info['device']) for a in wgpu.gpu.enumerate_adapters_sync()]"
if [ "${RUN_TESTS:-1}" = 1 ] && PYTHONPATH=/tmp/site "$PY" -c "import pytest" 2>/dev/null; then
    PYTHONPATH=/tmp/site:core:plugins/webgpu:plugins/cpu JAXCORE_PLUGINS=jaxcore_cpu.plugin,jaxcore_webgpu.plugin \
        "$PY" -m pytest -q -p no:cacheprovider -p no:jaxcore plugins/webgpu/tests 2>&1 | tail -5 || true
fi
"$PY" bench/webgpu.py --json "$OUT/webgpu-bench.json" "$@" 2>&1 | tee "$OUT/webgpu-bench.txt"
