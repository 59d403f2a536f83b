"""Kernel -> compiled wasmtime Module, through the process cache, the disk cache, or LLVM + Cranelift.

Setting JAXCORE_WASM_DUMP=DIR writes each freshly generated kernel's IR (as generated and as
optimised) and its .wasm there, named by the kernel key.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import wasmtime

from jaxcore import settings
from jaxcore.plugin import DType, Kernel
from jaxcore_wasm import codegen, module, toolchain
from jaxcore_wasm.cache import DiskCache
from jaxcore_wasm.codegen import KernelPlan
from jaxcore_wasm.matmul import MatmulPlan
from jaxcore_wasm.runtime import engine


@dataclass(frozen=True)
class CompiledKernel:
    module: wasmtime.Module | None
    plan: KernelPlan
    source: str  # "llvm", "disk" or "memory"


class Compiler:
    """Process-wide: wasmtime Modules belong to the one engine, so every backend can share them."""

    def __init__(self, disk: DiskCache | None = None) -> None:
        self.disk = disk or DiskCache()
        self._mem: dict[str, CompiledKernel] = {}
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        self.llvm_compiles = 0

    def compile(self, kernel: Kernel) -> CompiledKernel:
        key = kernel.key()
        ck, cached = self._once(key, lambda: self._from_disk(key) or self._build(kernel, key))
        return dataclasses.replace(ck, source="memory") if cached else ck

    def _once(self, key: str, load: Callable[[], CompiledKernel]) -> tuple[CompiledKernel, bool]:
        """The entry for `key`, loaded at most once even when asked for from several threads at
        once; the flag says it was already in this process's memory."""
        hit = self._mem.get(key)
        if hit is not None:
            return hit, True
        with self._lock:
            lock = self._key_locks.setdefault(key, threading.Lock())
        with lock:
            hit = self._mem.get(key)
            if hit is not None:
                return hit, True
            ck = self._mem[key] = load()
            return ck, False

    def _from_disk(self, key: str) -> CompiledKernel | None:
        got = self.disk.get(key)
        if got is None:
            return None
        plan_d, payload = got
        try:
            plan_d = {k: v for k, v in plan_d.items() if not k.startswith("_")}
            plan_d["out_dtype"] = DType(plan_d["out_dtype"])
            mm = plan_d.get("matmul")
            if mm is not None:
                plan_d["matmul"] = MatmulPlan(
                    **{k: tuple(v) if isinstance(v, list) else v for k, v in mm.items()}
                )
            plan = KernelPlan(**plan_d)
            mod = wasmtime.Module.deserialize(engine(), payload) if payload else None
        except Exception:  # noqa: BLE001 - any bad entry means "not cached"
            self.disk.errors += 1
            self.disk.drop(key)
            return None
        return CompiledKernel(mod, plan, "disk")

    def _build(self, kernel: Kernel, key: str) -> CompiledKernel:
        text, plan = codegen.generate(kernel)
        mod = None
        if text:
            mod = self._compile_text(text, key, str(kernel))
        if self.disk.enabled:
            self.disk.put(key, dataclasses.asdict(plan), bytes(mod.serialize()) if mod else b"")
        return CompiledKernel(mod, plan, "llvm")

    def _compile_text(self, text: str, key: str, what: str) -> wasmtime.Module:
        obj, optimised = toolchain.compile_ir(text)
        wasm = module.finalize(obj)
        self.llvm_compiles += 1
        dump = settings.current().plugin("wasm").get("dump")
        if dump:
            d = Path(dump)
            d.mkdir(parents=True, exist_ok=True)
            (d / f"{key}.ll").write_text(text)
            (d / f"{key}.opt.ll").write_text(optimised)
            (d / f"{key}.wasm").write_bytes(wasm)
            (d / f"{key}.txt").write_text(what + "\n")
        return wasmtime.Module(engine(), wasm)

    def library(self, name: str, key: str, make_text: Callable[[], str]) -> wasmtime.Module:
        """A kernel-independent module (the SGEMM), compiled once per process and cached on disk."""

        def build() -> CompiledKernel:
            mod = self._compile_text(make_text(), key, name)
            plan = KernelPlan(0, 0, 0, False, 0, DType.float32)
            if self.disk.enabled:
                self.disk.put(key, dataclasses.asdict(plan), bytes(mod.serialize()))
            return CompiledKernel(mod, plan, "llvm")

        return self._once(key, lambda: self._from_disk(key) or build())[0].module


_compiler: Compiler | None = None
_lock = threading.Lock()


def compiler() -> Compiler:
    global _compiler
    with _lock:
        if _compiler is None:
            _compiler = Compiler()
        return _compiler
