"""Compile time of big kernels on the wasm device (prepare_kernel with the disk cache off).

    PYTHONPATH=core:plugins/cpu:plugins/wasm python plugins/wasm/tools/bench_compile.py [kind:nodes ...]

Kinds: `trans` (wide: a third transcendentals, a third compares/selects/mods, the rest arithmetic),
`plain` (wide arithmetic), `deep` (a chain `nodes` deep; run in a thread with a large stack since
the core's traversals still recurse). Prints wall and CPU seconds (CPU time is the fairer number on
a loaded machine: LLVM runs on the calling thread).
"""

from __future__ import annotations

import os
import sys
import threading
import time

os.environ["JAXCORE_WASM_DISK_CACHE"] = "0"

import numpy as np  # noqa: E402

from jaxcore import AluExp, AluVar, DType, Kernel  # noqa: E402

g = AluVar.gidx


def wide(nodes: int, kind: str, n: int = 256) -> Kernel:
    rng = np.random.default_rng(nodes)
    a = AluExp.global_index(DType.float32, 0, n, g)
    terms = []
    count = i = 0
    while count < nodes:
        i += 1
        x = AluExp.global_index(DType.float32, 1, n, AluExp.mod(g + AluExp.i32(i), AluExp.i32(n)))
        c = AluExp.const(DType.float32, float(rng.random()))
        if kind == "plain":
            terms.append(AluExp.max(a * c, x) + x * c)
        elif i % 2:
            terms.append(AluExp.max(a * c, AluExp.sin(x * c)) + AluExp.exp(x - c))
        else:
            terms.append(AluExp.where(AluExp.cmplt(x, c), AluExp.mod(x, c), AluExp.log(x + c)) * c)
        count += 10
    while len(terms) > 1:
        terms = [terms[j] + terms[j + 1] if j + 1 < len(terms) else terms[j] for j in range(0, len(terms), 2)]
    return Kernel(2, n, terms[0])


def deep(depth: int, n: int = 64) -> Kernel:
    x = AluExp.global_index(DType.float32, 0, n, g)
    e = x
    for i in range(depth):
        e = e * 1.0001 + x if i % 2 else AluExp.max(e, x) - 0.5
        e.key()
    return Kernel(1, n, e)


def main(specs: list[str]) -> None:
    from jaxcore_wasm.backend import WasmBackend

    be = WasmBackend(threads=1)
    for spec in specs:
        kind, _, size = spec.partition(":")
        k = deep(int(size)) if kind == "deep" else wide(int(size), kind)
        nodes = sum(1 for _ in k.nodes())
        w, c = time.perf_counter(), time.process_time()
        be.prepare_kernel(k)
        w, c = time.perf_counter() - w, time.process_time() - c
        print(f"{kind:6} {nodes:6d} nodes  prepare {w:7.2f} s wall {c:7.2f} s cpu", flush=True)


if __name__ == "__main__":
    sys.setrecursionlimit(1_000_000)
    threading.stack_size(1 << 28)
    args = sys.argv[1:] or [f"{k}:{n}" for k in ("trans", "plain") for n in (3000, 6000, 12000, 24000)]
    t = threading.Thread(target=main, args=(args,))
    t.start()
    t.join()
