"""Kernel -> compiled wasmtime Module, through the process cache, the disk cache, or LLVM + Cranelift.

The process cache is an LRU of MEMORY_CACHE entries (setting JAXCORE_WASM_MEMORY_CACHE=N): a
long-running process that compiles ever new kernels keeps the recent ones, not all of them. What
the disk cache hands back is checked against the kernel before use (see `_from_disk`).

Setting JAXCORE_WASM_DUMP=DIR writes each freshly generated kernel's IR (as generated and as
optimised) and its .wasm there, named by the kernel key.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import wasmtime

from jaxcore import settings
from jaxcore.plugin import DType, Kernel
from jaxcore_wasm import codegen, module, toolchain
from jaxcore_wasm.cache import DiskCache, int_setting
from jaxcore_wasm.codegen import KernelPlan
from jaxcore_wasm.matmul import MatmulPlan
from jaxcore_wasm.runtime import engine

# Compiled kernels kept in memory (measured: ~105 KiB each with its instance, so ~55 MiB in all).
MEMORY_CACHE = 512
SGEMM_PARAMS = 12


def memory_cache_size() -> int:
    return int_setting("memory_cache", MEMORY_CACHE, minimum=1)


@dataclass(frozen=True)
class CompiledKernel:
    module: wasmtime.Module | None
    plan: KernelPlan
    source: str  # "llvm", "disk" or "memory"


class BadEntry(ValueError):
    """A disk-cache entry that does not fit the kernel it is stored for."""


def check_module(mod: wasmtime.Module | None, entries: dict[str, int]) -> None:
    """`mod` exports exactly `entries` (name -> number of i32 parameters, no results) and imports
    nothing but one shared linear memory."""
    if mod is None:
        if entries:
            raise BadEntry(f"no module, but the plan needs {sorted(entries)}")
        return
    got = {}
    for exp in mod.exports:
        ty = exp.type
        if isinstance(ty, wasmtime.FuncType):
            if ty.results or any(str(p) != "i32" for p in ty.params):
                raise BadEntry(f"export {exp.name} has type {ty}")
            got[exp.name] = len(ty.params)
    if got != entries:
        raise BadEntry(f"module exports {got}, the plan needs {entries}")
    imports = [i.type for i in mod.imports]
    if len(imports) != 1 or not isinstance(imports[0], wasmtime.MemoryType) or not imports[0].is_shared:
        raise BadEntry(f"module imports {[(i.module, i.name) for i in mod.imports]}, not one shared memory")


def _plan_from(d: dict[str, Any]) -> KernelPlan:
    d = {k: v for k, v in d.items() if not k.startswith("_")}
    d["out_dtype"] = DType(d["out_dtype"])
    mm = d.get("matmul")
    if mm is not None:
        fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in mm.items()}
        d["matmul"] = MatmulPlan(**fields)
    return KernelPlan(**d)


class Compiler:
    """Process-wide: wasmtime Modules belong to the one engine, so every backend can share them."""

    def __init__(self, disk: DiskCache | None = None, capacity: int | None = None) -> None:
        self.disk = disk or DiskCache()
        self.capacity = memory_cache_size() if capacity is None else max(1, capacity)
        self._mem: OrderedDict[str, CompiledKernel] = OrderedDict()
        self._lock = threading.Lock()
        self._key_locks: dict[str, tuple[threading.Lock, list[int]]] = {}  # key -> (lock, [waiters])
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._mem)

    def compile(self, kernel: Kernel) -> CompiledKernel:
        key = kernel.key()
        ck, cached = self._once(key, lambda: self._from_disk(key, kernel) or self._build(kernel, key))
        return dataclasses.replace(ck, source="memory") if cached else ck

    def _get(self, key: str) -> CompiledKernel | None:
        with self._lock:
            hit = self._mem.get(key)
            if hit is not None:
                self._mem.move_to_end(key)
            return hit

    def _put(self, key: str, ck: CompiledKernel) -> None:
        with self._lock:
            self._mem[key] = ck
            self._mem.move_to_end(key)
            while len(self._mem) > self.capacity:
                self._mem.popitem(last=False)
                self.evictions += 1

    def _once(self, key: str, load: Callable[[], CompiledKernel]) -> tuple[CompiledKernel, bool]:
        """The entry for `key`, loaded at most once even when asked for from several threads at
        once; the flag says it was already in this process's memory. Only threads asking for the
        same key wait on each other, and only while it loads."""
        hit = self._get(key)
        if hit is not None:
            return hit, True
        with self._lock:
            lock, waiters = self._key_locks.setdefault(key, (threading.Lock(), [0]))
            waiters[0] += 1
        try:
            with lock:
                hit = self._get(key)
                if hit is not None:
                    return hit, True
                ck = load()
                self._put(key, ck)
                return ck, False
        finally:
            with self._lock:
                waiters[0] -= 1
                if not waiters[0]:
                    del self._key_locks[key]

    def _from_disk(
        self, key: str, kernel: Kernel | None, expect: KernelPlan | None = None
    ) -> CompiledKernel | None:
        """The disk entry for `key` if it is what `kernel` compiles to: the plan codegen would make
        (one that disagreed would read or write past the kernel's buffers) and a module exporting
        that plan's entry points with their arity. `kernel` None is the SGEMM library."""
        got = self.disk.get(key)
        if got is None:
            return None
        plan_d, payload = got
        try:
            plan = _plan_from(plan_d)
            if expect is None:
                assert kernel is not None  # the SGEMM library (kernel None) passes its plan
                expect = codegen.plan(kernel)
            if plan != expect:
                raise BadEntry(f"plan {plan} is not the kernel's {expect}")
            mod = wasmtime.Module.deserialize(engine(), payload) if payload else None
            check_module(mod, {"sgemm": SGEMM_PARAMS} if kernel is None else codegen.entry_points(plan))
        except Exception:  # noqa: BLE001 - any bad entry means "not cached"
            self.disk.errors += 1
            self.disk.drop(key)
            return None
        return CompiledKernel(mod, plan, "disk")

    def _build(self, kernel: Kernel, key: str) -> CompiledKernel:
        gen = codegen.generate(kernel)
        text, plan = gen.text, gen.plan
        mod = None
        if text:
            mod = self._compile_text(text, key, kernel, gen.codegen_opt)
        if self.disk.enabled:
            self.disk.put(key, dataclasses.asdict(plan), bytes(mod.serialize()) if mod else b"")
        return CompiledKernel(mod, plan, "llvm")

    def _compile_text(self, text: str, key: str, what: object, codegen_opt: int = 3) -> wasmtime.Module:
        obj, optimised = toolchain.compile_ir(text, codegen_opt=codegen_opt)
        wasm = module.finalize(obj)
        dump = settings.current().plugin("wasm").get("dump")
        if dump:
            d = Path(dump)
            d.mkdir(parents=True, exist_ok=True)
            (d / f"{key}.ll").write_text(text)
            (d / f"{key}.opt.ll").write_text(optimised)
            (d / f"{key}.wasm").write_bytes(wasm)
            (d / f"{key}.txt").write_text(f"{what}\n")  # str(kernel) only when dumping: it is slow
        return wasmtime.Module(engine(), wasm)

    def library(
        self, name: str, key: str, make_text: Callable[[], str], codegen_opt: int = 3
    ) -> wasmtime.Module:
        """A kernel-independent module (the SGEMM), compiled once per process and cached on disk
        (`key` must name everything its code depends on, `codegen_opt` included)."""

        def build() -> CompiledKernel:
            mod = self._compile_text(make_text(), key, name, codegen_opt)
            plan = KernelPlan(0, 0, 0, False, 0, DType.float32)
            if self.disk.enabled:
                self.disk.put(key, dataclasses.asdict(plan), bytes(mod.serialize()))
            return CompiledKernel(mod, plan, "llvm")

        lib_plan = KernelPlan(0, 0, 0, False, 0, DType.float32)
        mod = self._once(key, lambda: self._from_disk(key, None, lib_plan) or build())[0].module
        assert mod is not None  # the SGEMM always has code (check_module refuses an entry without)
        return mod


_compiler: Compiler | None = None
_lock = threading.Lock()


def compiler() -> Compiler:
    global _compiler
    with _lock:
        if _compiler is None:
            _compiler = Compiler()
        return _compiler
