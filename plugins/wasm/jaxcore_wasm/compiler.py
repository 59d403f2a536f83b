"""Kernel -> compiled wasmtime Module, through the process cache, the disk cache, or LLVM + Cranelift.

The process cache is an LRU of MEMORY_CACHE entries (setting JAXCORE_WASM_MEMORY_CACHE=N): a
long-running process that compiles ever new kernels keeps the recent ones, not all of them.

The disk cache is keyed by the generated source (`source_digest`: the LLVM IR text, the machine-code
level and the core's `lowering_digest()`), so a kernel's IR is generated even on a hit (0.2-0.5 ms
for the bench kernels, 5 ms for a 200-deep chain of transcendentals). Every module is compiled with
one more export, an empty function named after that digest (`marker`): a module carries the identity
of the source it was built from, and an entry is used only if its module shows this kernel's digest
and the plan codegen gives (see `_from_disk`). A module of another kernel, copied into an entry or
written through `DiskCache.put` with a valid checksum, is therefore a miss. This guards against
mistakes, not malice: whoever can write the cache directory can write a module that lies, just as
they could edit the installed Python code (the directory is as trusted as the Python environment).

Setting JAXCORE_WASM_DUMP=DIR writes each freshly generated kernel's IR (as generated and as
optimised) and its .wasm there, named by the kernel key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import wasmtime

from jaxcore import settings
from jaxcore.digest import lowering_digest
from jaxcore.plugin import DType, Kernel
from jaxcore_wasm import codegen, module, worker
from jaxcore_wasm.cache import DiskCache, int_setting
from jaxcore_wasm.codegen import KernelPlan
from jaxcore_wasm.matmul import MatmulPlan
from jaxcore_wasm.runtime import engine

# Compiled kernels kept in memory (measured: ~105 KiB each with its instance, so ~55 MiB in all).
MEMORY_CACHE = 512
MARKER = "jx_src_"  # the export that names a module's source digest


def memory_cache_size() -> int:
    return int_setting("memory_cache", MEMORY_CACHE, minimum=1)


@dataclass(frozen=True)
class CompiledKernel:
    module: wasmtime.Module | None
    plan: KernelPlan
    source: str  # "llvm", "disk" or "memory"


class BadEntry(ValueError):
    """A disk-cache entry that does not fit the kernel it is stored for."""


def source_digest(text: str, codegen_opt: int) -> str:
    """What the disk cache keys and checks a module by: its IR, machine-code level and the core's
    lowering (whose code shaped the IR; the cache's salt covers the toolchain's versions)."""
    h = hashlib.sha256(text.encode())
    h.update(f"|opt={codegen_opt}|lowering={lowering_digest()}".encode())
    return h.hexdigest()


def marker(digest: str) -> str:
    """The name of the empty function a module built from source `digest` exports."""
    return MARKER + digest[:32]


def with_marker(text: str, digest: str) -> str:
    """`text` plus the exported marker function, so that the module names the source it came from."""
    return text + f'\ndefine void @jx_source() "wasm-export-name"="{marker(digest)}" {{\n  ret void\n}}\n'


def check_module(mod: wasmtime.Module | None, entries: dict[str, int] | None, digest: str) -> None:
    """`mod` exports the marker of `digest` and exactly `entries` besides (name -> number of i32
    parameters, no results; None: any such functions) and imports nothing but one shared memory."""
    if mod is None:
        raise BadEntry("an entry without a module")
    got = {}
    for exp in mod.exports:
        ty = exp.type
        if isinstance(ty, wasmtime.FuncType):
            if ty.results or any(str(p) != "i32" for p in ty.params):
                raise BadEntry(f"export {exp.name} has type {ty}")
            got[exp.name] = len(ty.params)
    if got.pop(marker(digest), None) != 0:
        raise BadEntry(f"module was built from another source than {digest[:32]}: it exports {sorted(got)}")
    if entries is not None and got != entries:
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
        ck, cached = self._once(key, lambda: self._load(kernel, key))
        return dataclasses.replace(ck, source="memory") if cached else ck

    def disk_key(self, kernel: Kernel) -> str | None:
        """The disk-cache key of `kernel`'s module (None: it compiles to no module)."""
        gen = codegen.generate(kernel)
        return source_digest(gen.text, gen.codegen_opt) if gen.text else None

    def _load(self, kernel: Kernel, key: str) -> CompiledKernel:
        """Generate `kernel`'s IR; its module from disk when an entry of that very source is there,
        else compiled (and stored)."""
        gen = codegen.generate(kernel)
        if not gen.text:  # a matmul straight into the SGEMM: nothing to compile, nothing to cache
            return CompiledKernel(None, gen.plan, "llvm")
        digest = source_digest(gen.text, gen.codegen_opt)
        ck = self._from_disk(digest, gen.plan, codegen.entry_points(gen.plan))
        if ck is None:
            mod = self._compile_text(with_marker(gen.text, digest), key, kernel, gen.codegen_opt)
            if self.disk.enabled:
                self.disk.put(digest, dataclasses.asdict(gen.plan), bytes(mod.serialize()))
            ck = CompiledKernel(mod, gen.plan, "llvm")
        return ck

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
        self, digest: str, expect: KernelPlan, entries: dict[str, int] | None
    ) -> CompiledKernel | None:
        """The disk entry of source `digest` if it holds what that source compiles to: the plan
        codegen made (one that disagreed would read or write past the kernel's buffers) and a module
        that shows the digest's marker and exports `entries` (None: a library's, unchecked)."""
        got = self.disk.get(digest)
        if got is None:
            return None
        plan_d, payload = got
        try:
            plan = _plan_from(plan_d)
            if plan != expect:
                raise BadEntry(f"plan {plan} is not the kernel's {expect}")
            mod = wasmtime.Module.deserialize(engine(), payload) if payload else None
            check_module(mod, entries, digest)
        except Exception:  # noqa: BLE001 - any bad entry means "not cached"
            self.disk.errors += 1
            self.disk.drop(digest)
            return None
        return CompiledKernel(mod, plan, "disk")

    def _compile_text(self, text: str, key: str, what: object, codegen_opt: int = 3) -> wasmtime.Module:
        obj, optimised = worker.compile_ir(text, codegen_opt=codegen_opt)
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
        """A kernel-independent module (the SGEMM, the radix sort), compiled once per process and
        cached on disk by its source like a kernel's (`key` names it in this process's memory)."""

        def load() -> CompiledKernel:
            text = make_text()
            digest = source_digest(text, codegen_opt)
            plan = KernelPlan(0, 0, 0, False, 0, DType.float32)
            ck = self._from_disk(digest, plan, None)
            if ck is None:
                mod = self._compile_text(with_marker(text, digest), key, name, codegen_opt)
                if self.disk.enabled:
                    self.disk.put(digest, dataclasses.asdict(plan), bytes(mod.serialize()))
                ck = CompiledKernel(mod, plan, "llvm")
            return ck

        mod = self._once(key, load)[0].module
        assert mod is not None  # a library always has code (check_module refuses an entry without)
        return mod


_compiler: Compiler | None = None
_lock = threading.Lock()


def compiler() -> Compiler:
    global _compiler
    with _lock:
        if _compiler is None:
            _compiler = Compiler()
        return _compiler
