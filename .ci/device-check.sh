#!/bin/bash
# One GPU call: the webgpu suite, the webgl fuzz of one seed with every fragment shader dumped (the
# last one written before a driver crash is the shader that crashed it), and bench/webgpu.py.
set -uo pipefail
OUT=${OUT:-/tmp/jaxcore-device}; mkdir -p "$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
PY=/opt/torch/.venv/bin/python3
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
NV=/usr/local/nvidia/share
export VK_DRIVER_FILES=$NV/vulkan/icd.d/nvidia_icd.json __EGL_VENDOR_LIBRARY_FILENAMES=$NV/glvnd/egl_vendor.d/10_nvidia.json
export PYTHONPATH=/tmp/site:$PWD/core:$PWD/plugins/cpu:$PWD/plugins/webgpu:$PWD/plugins/webgl
export PYTHONUNBUFFERED=1 XDG_RUNTIME_DIR=/tmp PYOPENGL_PLATFORM=egl JAXCORE_WEBGL_PLATFORM=egl
export __GL_SHADER_DISK_CACHE=0 JAXCORE_WEBGL_DISK_CACHE=0 JAXCORE_DISABLE_PLUGIN_AUTOLOAD=1
export JAXCORE_PLUGINS=jaxcore_cpu.plugin,jaxcore_webgpu.plugin,jaxcore_webgl.plugin
T0=$(date +%s)
mkdir -p /tmp/dump
JAXCORE_WEBGL_DUMP=/tmp/dump timeout 150 "$PY" -X faulthandler bench/fuzz.py --device webgl --reference cpu \
    --seed "${SEED:-796174529}" --count 2000 --chunk 2000 --batch 1 --quiet > "$OUT/fuzz-webgl.txt" 2>&1
echo "webgl fuzz exit $? ($(( $(date +%s) - T0 )) s); shaders dumped: $(ls /tmp/dump | wc -l)"
(cd /tmp/dump && ls -t | head -3 | xargs tar czf "$OUT/last-shaders.tgz")
"$PY" -m pytest -q -p no:cacheprovider tests/test_conformance_intree.py --jaxcore-device=webgpu 2>&1 \
    | tee "$OUT/suite-webgpu.txt" | grep -E "^(FAILED|[0-9]+ (passed|failed))" | head -20
echo "suite done ($(( $(date +%s) - T0 )) s)"
timeout 200 "$PY" bench/webgpu.py 2>&1 | tee "$OUT/bench-webgpu.txt" | tail -16
echo "end ($(( $(date +%s) - T0 )) s)"
