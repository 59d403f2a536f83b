"""Fixtures for the wasm plugin's own tests: tiny modules around single builtins, and backends."""

from __future__ import annotations

import numpy as np
import pytest
import wasmtime

from jaxcore_wasm import builtins, module, runtime, toolchain
from jaxcore_wasm.irtext import F32, F64, I32, Fn, Module
from jaxcore_wasm.memory import Allocator

_TY = {F32: np.float32, F64: np.float64, I32: np.uint32}


class Harness:
    def __init__(self) -> None:
        self.engine = runtime.engine()
        self.mem = runtime.Memory(self.engine)
        self.alloc = Allocator(self.mem.ensure)
        self.lane = runtime.Lane(self.engine, self.mem)

    def map_fn(self, helper: str, mod: Module, arg_tys: list[str], ret: str) -> wasmtime.Module:
        """Export `run(in0.., out, n)` applying `helper` elementwise."""
        params = [("ptr", f"%p{i}") for i in range(len(arg_tys))] + [("ptr", "%o"), (I32, "%n")]
        f = Fn("run", "void", params, "#0")
        l_loop, l_exit = "loop", "exit"
        f.raw("br label %loop")
        f.start(l_loop)
        i = f.phi(I32, [("0", "entry"), ("%inext", l_loop)])
        args = []
        for k, t in enumerate(arg_tys):
            p = f.emit(f"getelementptr inbounds {t}, ptr %p{k}, i32 {i}")
            args.append((t, f.emit(f"load {t}, ptr {p}")))
        r = f.call(ret, helper, args)
        po = f.emit(f"getelementptr inbounds {ret}, ptr %o, i32 {i}")
        f.raw(f"store {ret} {r}, ptr {po}")
        f.lines.append(f"  %inext = add i32 {i}, 1")
        c = f.icmp("slt", I32, "%inext", "%n")
        f.cbr(c, l_loop, l_exit)
        f.start(l_exit)
        f.raw("ret void")
        mod.functions.append(f.render())
        mod.attr_group('nounwind "wasm-export-name"="run"')
        obj, _ = toolchain.compile_ir(mod.render())
        return wasmtime.Module(self.engine, module.finalize(obj))

    def run(self, wmod: wasmtime.Module, inputs: list[np.ndarray], out_dtype) -> np.ndarray:
        n = len(inputs[0])
        ptrs = []
        for x in inputs:
            p = self.alloc.alloc(x.nbytes)
            np.frombuffer(self.mem.view(p, x.nbytes), dtype=x.dtype)[:] = x
            ptrs.append(p)
        out_nbytes = n * np.dtype(out_dtype).itemsize
        po = self.alloc.alloc(out_nbytes)
        f = self.lane.funcs(wmod)["run"]
        self.lane.call(f, runtime.make_args([*ptrs, po, n]), len(ptrs) + 2)
        res = np.frombuffer(self.mem.view(po, out_nbytes), dtype=out_dtype).copy()
        for p in [*ptrs, po]:
            self.alloc.free(p)
        return res

    def unary(self, op: str, ty: str, x: np.ndarray) -> np.ndarray:
        mod = Module(toolchain.TRIPLE, toolchain.datalayout())
        h = builtins.unary(mod, op, ty)
        return self.run(self.map_fn(h, mod, [ty], ty), [x.astype(_TY[ty])], _TY[ty])


def new_module() -> Module:
    return Module(toolchain.TRIPLE, toolchain.datalayout())


@pytest.fixture(scope="session")
def harness() -> Harness:
    return Harness()


@pytest.fixture(scope="session")
def wasm_backend():
    from jaxcore_wasm.backend import WasmBackend

    return WasmBackend(threads=2)
