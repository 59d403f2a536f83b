#!/bin/bash
# The webgl conformance suite and bench_local.py on a lent GPU machine (NVIDIA EGL), with no network.
# On the dev machine, once: wheels into .whl/ (PyOpenGL glfw pluggy pytest iniconfig packaging pygments
# hypothesis attrs sortedcontainers, for cp312) and `apt-get download libegl1 libglvnd0 libgles2` into
# .gl/; then `run` with carry [".whl", ".gl"] and: bash plugins/webgl/tools/device_run.sh
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
PY=${PY:-/opt/torch/.venv/bin/python3}
[ -x "$PY" ] || PY=python3
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:core:plugins/webgl:plugins/cpu PYTHONUNBUFFERED=1
export JAXCORE_DISABLE_PLUGIN_AUTOLOAD=1 JAXCORE_PLUGINS=jaxcore_cpu.plugin,jaxcore_webgl.plugin
export JAXCORE_WEBGL_PLATFORM=egl JAXCORE_CACHE_DIR=/tmp/jxcache
OUT=${OUT:-/tmp}
"$PY" -c "import jaxcore; b = jaxcore.get_backend('webgl'); print(b.info)" 2>&1 | tee "$OUT/webgl-info.txt"
"$PY" -m pytest -q -p no:cacheprovider -p jaxcore.conformance.plugin --pyargs jaxcore.conformance \
    --jaxcore-device=webgl -x -q 2>&1 | tail -40 | tee "$OUT/webgl-conformance.txt"
"$PY" plugins/webgl/bench_local.py 2>&1 | tee "$OUT/webgl-bench.txt"
