#!/bin/bash
# The conformance suite and the differential fuzz for the GPU devices, on a GPU machine with no
# network (set up as in .ci/device-bench.sh: wheels in .whl, loaders in .gl). Logs land in $OUT.
#
#   bash .ci/device-suite.sh                      # webgpu and webgl: suite + 3 fuzz seeds of 700
#   DEVICES=webgl SEEDS=40 COUNT=600 bash .ci/device-suite.sh
#   LOCAL=1 bash .ci/device-suite.sh              # here, with the venv's python (no installs)
#   BENCH=1 SUITE=0 SEEDS=0 bash .ci/device-suite.sh   # the GPU benches only (PyTorch side by side)
#
# The NVIDIA driver's shader cache is off (__GL_SHADER_DISK_CACHE=0), so every shader is compiled
# and a compiler crash cannot hide behind a cached binary. Each fuzz seed runs in its own process:
# a driver crash ends that seed (reported by its exit status), not the run.
set -uo pipefail
OUT=${OUT:-/tmp/jaxcore-device}
mkdir -p "$OUT"
DEVICES=${DEVICES:-webgpu webgl}
SEEDS=${SEEDS:-3}
COUNT=${COUNT:-700}
SUITE=${SUITE:-1}
SEED0=${SEED0:-$(( $(date +%s) % 1000000000 ))}
if [ "${LOCAL:-0}" = 1 ]; then
    PY=${PY:-.venv/bin/python}
else
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
    PY=${PY:-/opt/torch/.venv/bin/python3}
    [ -x "$PY" ] || PY=python3
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
    NV=/usr/local/nvidia/share
    [ -f $NV/vulkan/icd.d/nvidia_icd.json ] && export VK_DRIVER_FILES=$NV/vulkan/icd.d/nvidia_icd.json
    [ -f $NV/glvnd/egl_vendor.d/10_nvidia.json ] &&
        export __EGL_VENDOR_LIBRARY_FILENAMES=$NV/glvnd/egl_vendor.d/10_nvidia.json
fi
export PYTHONPATH=/tmp/site:$PWD/core:$PWD/plugins/cpu:$PWD/plugins/webgpu:$PWD/plugins/webgl
export PYTHONUNBUFFERED=1 XDG_RUNTIME_DIR=/tmp PYOPENGL_PLATFORM=egl JAXCORE_WEBGL_PLATFORM=egl
export __GL_SHADER_DISK_CACHE=0 JAXCORE_WEBGL_DISK_CACHE=0
export JAXCORE_PLUGINS=jaxcore_cpu.plugin,jaxcore_webgpu.plugin,jaxcore_webgl.plugin
export JAXCORE_DISABLE_PLUGIN_AUTOLOAD=1
T0=$(date +%s)
stamp() { echo "== $* ($(( $(date +%s) - T0 )) s)"; }

"$PY" -c "import jaxcore; jaxcore.init(); [print(i.name, i.status, i.reason, i.capabilities and i.capabilities.description) for i in jaxcore.device_info()]" 2>&1 | tail -4
case " $DEVICES " in *" webgpu "*)  # what float64 work does to float32 in the same kernel (open)
    "$PY" bench/probe_beside_f64.py 2>&1 | tee "$OUT/probe-beside-f64.txt" | tail -17 ;;
esac
for d in $DEVICES; do
    if [ "$SUITE" = 1 ]; then
        stamp "suite $d"
        "$PY" -m pytest -q -p no:cacheprovider tests/test_conformance_intree.py "plugins/$d/tests" \
            --jaxcore-device="$d" -x --maxfail=30 2>&1 | tee "$OUT/suite-$d.txt" | tail -25
    fi
    for i in $(seq 0 $(( SEEDS - 1 )) 2>/dev/null); do
        seed=$(( SEED0 + 7919 * i ))
        "$PY" bench/fuzz.py --device "$d" --reference cpu --seed "$seed" --count "$COUNT" --chunk "$COUNT" \
            > "$OUT/fuzz-$d-$seed.txt" 2>&1
        rc=$?
        echo "fuzz $d seed $seed: exit $rc; $(grep -E "^$d " "$OUT/fuzz-$d-$seed.txt" | tail -1)"
        [ $rc -gt 1 ] && tail -5 "$OUT/fuzz-$d-$seed.txt"
    done
    stamp "fuzz $d done"
done
if [ "${BENCH:-0}" = 1 ]; then
    stamp "bench webgpu"
    "$PY" bench/webgpu.py --json "$OUT/bench-webgpu.json" 2>&1 | tee "$OUT/bench-webgpu.txt"
    "$PY" bench/webgpu_routines.py --json "$OUT/bench-routines.json" 2>&1 | tee "$OUT/bench-routines.txt"
    "$PY" bench/webgpu_tiles.py 2>&1 | tee "$OUT/bench-tiles.txt"
    stamp "bench webgl"
    "$PY" plugins/webgl/bench_local.py 2>&1 | tee "$OUT/bench-webgl.txt"
    stamp "bench done"
fi
