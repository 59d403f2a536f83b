"""Allocator, module writer and disk cache of the wasm plugin."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import wasmtime

from jaxcore_wasm import module, runtime
from jaxcore_wasm.cache import DiskCache
from jaxcore_wasm.memory import ALIGN, PAGE, Allocator, size_class


def test_size_classes() -> None:
    assert [size_class(n) for n in (1, 64, 65, 512, 513, 4096, 4097, PAGE, PAGE + 1)] == [
        64, 64, 128, 512, 1024, 4096, 8192, PAGE, 2 * PAGE,
    ]  # fmt: skip


def test_allocator_reuses_and_never_hands_out_twice() -> None:
    grown = []
    a = Allocator(grown.append, limit=1 << 20)
    ptrs = [a.alloc(n) for n in (10, 100, 1000, 5000, 70000, 10)]
    assert a.alloc(0) == 0 and 0 not in ptrs
    assert all(p % ALIGN == 0 for p in ptrs)
    spans = sorted((p, p + a.size_of(p)) for p in ptrs)
    assert all(e <= s for (_, e), (s, _) in zip(spans, spans[1:])), "blocks overlap"
    a.free(ptrs[1])
    assert a.alloc(90) == ptrs[1]  # same class, reused (LIFO)
    with pytest.raises(ValueError):
        a.free(12345)
    assert grown and max(grown) <= 1 << 20


def test_allocator_memory_error_and_reclaim() -> None:
    a = Allocator(lambda n: None, limit=8 * PAGE)
    blocks = [a.alloc(PAGE) for _ in range(7)]
    with pytest.raises(MemoryError, match="4 GiB"):
        a.alloc(2 * PAGE)
    for p in blocks[2:5]:
        a.free(p)
    p = a.alloc(3 * PAGE)  # coalesced from three freed neighbours
    assert p == blocks[2]


def test_shared_memory_grows_and_never_moves() -> None:
    mem = runtime.Memory(runtime.engine())
    base = mem.base
    mem.ensure(50 * PAGE + 1)
    assert mem.nbytes >= 51 * PAGE and mem.base == base
    mem.view(50 * PAGE, 16)[:] = b"x" * 16
    with pytest.raises(MemoryError):
        mem.ensure(2**32 + 1)


def _object_with_export() -> bytes:
    from jaxcore_wasm import toolchain

    text = f'''target triple = "{toolchain.TRIPLE}"
target datalayout = "{toolchain.datalayout()}"
define void @k(ptr %p) #0 {{
  store i32 7, ptr %p
  ret void
}}
attributes #0 = {{ nounwind "wasm-export-name"="k" }}
'''
    return toolchain.compile_ir(text)[0]


def test_finalize_makes_the_memory_import_shared() -> None:
    obj = _object_with_export()
    wasm = module.finalize(obj)
    assert module.exported_functions(wasm) == ["k"]
    assert all(sid != 0 for sid, _ in module.sections(wasm)), "custom sections are dropped"
    mod = wasmtime.Module(runtime.engine(), wasm)
    (imp,) = mod.imports
    assert (imp.module, imp.name) == ("env", "__linear_memory")
    mem = runtime.Memory(runtime.engine())
    lane = runtime.Lane(runtime.engine(), mem)
    lane.call(lane.funcs(mod)["k"], runtime.make_args([128]), 1)
    assert bytes(mem.view(128, 4)) == b"\x07\0\0\0"


def test_finalize_rejects_objects_that_need_a_linker() -> None:
    from jaxcore_wasm import toolchain

    text = f'''target triple = "{toolchain.TRIPLE}"
target datalayout = "{toolchain.datalayout()}"
declare float @fmodf(float, float)
define float @k(float %a) #0 {{
  %r = frem float %a, 3.0
  ret float %r
}}
attributes #0 = {{ nounwind "wasm-export-name"="k" }}
'''
    with pytest.raises(module.ModuleError, match="linker"):
        module.finalize(toolchain.compile_ir(text)[0])


def test_disk_cache_round_trip_and_corruption(tmp_path: Path) -> None:
    c = DiskCache(tmp_path, enabled=True)
    assert c.get("k1") is None
    c.put("k1", {"a": 1}, b"payload")
    assert c.get("k1") == ({"a": 1, "_key": "k1"}, b"payload")
    p = c.path("k1")
    blob = bytearray(p.read_bytes())
    blob[-1] ^= 0xFF
    p.write_bytes(bytes(blob))
    assert c.get("k1") is None and c.errors == 1 and not p.exists()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(b"garbage")
    assert c.get("k1") is None
    assert DiskCache(tmp_path, enabled=False).get("k1") is None


KEY_SCRIPT = """
from jaxcore import AluExp, AluOp, AluVar, DType, Kernel, Reduction
g, r = AluVar.gidx, AluVar.ridx
x = AluExp.global_index(DType.float32, 0, 1000, g * 10 + r)
k = Kernel(1, 100, AluExp.exp(x) * 0.5, Reduction(DType.float32, AluOp.Max, 10))
print(k.key())
"""


def test_kernel_key_is_stable_across_processes() -> None:
    env = dict(os.environ, PYTHONHASHSEED="random")
    keys = {subprocess.run([sys.executable, "-c", KEY_SCRIPT], env=env, capture_output=True, text=True,
                           check=True).stdout.strip() for _ in range(3)}  # fmt: skip
    assert len(keys) == 1 and len(keys.pop()) >= 32


WARM_SCRIPT = """
import time
from jaxcore import AluExp, AluVar, DType, Kernel
from jaxcore_wasm.backend import WasmBackend
be = WasmBackend(threads=1)
g = AluVar.gidx
k = Kernel(1, 64, AluExp.global_index(DType.float32, 0, 64, g) * 2.0 + 1.0)
t = time.perf_counter()
exe = be.prepare_kernel(k)
print(exe.data.source, time.perf_counter() - t)
"""


def test_second_process_starts_warm_and_corrupt_entries_rebuild(tmp_path: Path) -> None:
    env = dict(os.environ, JAXCORE_CACHE_DIR=str(tmp_path), JAXCORE_WASM_DISK_CACHE="1")

    def run() -> str:
        out = subprocess.run([sys.executable, "-c", WARM_SCRIPT], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()[0]

    assert run() == "llvm"
    assert run() == "disk"
    for f in (tmp_path / "wasm").rglob("*.bin"):
        data = bytearray(f.read_bytes())
        data[len(data) // 2] ^= 0x55
        f.write_bytes(bytes(data))
    assert run() == "llvm"  # the corrupt entry was ignored and rebuilt, not a crash
    assert run() == "disk"
    env["JAXCORE_WASM_DISK_CACHE"] = "0"
    assert run() == "llvm"


@pytest.mark.skipif(
    not Path("/sys/kernel/mm/transparent_hugepage").is_dir(), reason="no transparent huge pages (Linux only)"
)
def test_linear_memory_asks_for_huge_pages(monkeypatch) -> None:
    from jaxcore import settings

    eng = runtime.engine()
    assert runtime.Memory(eng).huge_pages
    monkeypatch.setenv("JAXCORE_WASM_HUGE_PAGES", "0")
    monkeypatch.setattr(settings, "_current", settings.Settings.from_env())
    assert not runtime.Memory(eng).huge_pages
