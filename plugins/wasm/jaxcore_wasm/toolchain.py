"""LLVM IR text -> optimised wasm32 object, through llvmlite's bundled LLVM (no linker, no libc).

The features are those wasmtime runs by default and that pay here: simd128 (+relaxed-simd for
fused multiply-add), saturating float->int (nontrapping-fptoint), sign-ext, bulk-memory, and
atomics so that the module may import a shared memory.
"""

from __future__ import annotations

import threading
from typing import Any

TRIPLE = "wasm32-unknown-unknown"
FEATURES = (
    "+simd128,+relaxed-simd,+nontrapping-fptoint,+sign-ext,+bulk-memory,+atomics,+multivalue,+mutable-globals"
)

_init_lock = threading.Lock()
_local = threading.local()  # a target machine per thread: LLVM does not promise one is thread-safe
_layout: str | None = None  # llvmlite is imported on first use: a warm (disk-cached) process never loads LLVM


class ToolchainError(RuntimeError):
    pass


def _initialize() -> Any:
    import llvmlite
    import llvmlite.binding as llvm

    with _init_lock:  # target registration is process-wide and runs once
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        try:
            return llvm.Target.from_triple(TRIPLE)
        except RuntimeError as e:
            raise ToolchainError(f"llvmlite {llvmlite.__version__} has no wasm32 target: {e}") from None


def target_machine(opt: int = 3) -> Any:
    """This thread's target machine for machine-code optimisation level `opt`."""
    tms = _local.__dict__.setdefault("tms", {})
    tm = tms.get(opt)
    if tm is None:
        target = _initialize()
        tm = tms[opt] = target.create_target_machine(
            cpu="generic", features=FEATURES, opt=opt, reloc="static", codemodel="default"
        )
    return tm


def datalayout() -> str:
    global _layout
    if _layout is None:
        _layout = str(target_machine().target_data)
    return _layout


def compile_ir(text: str, opt: int = 3, codegen_opt: int = 3) -> tuple[bytes, str]:
    """Parse, verify, optimise (O`opt`) and emit a wasm object (machine code at `codegen_opt`);
    returns (object bytes, optimised IR).

    No process-wide lock: each compile parses into an LLVM context of its own and uses this thread's
    target machine, so compiles on several threads run in parallel (llvmlite releases the GIL).
    Each run gets a PassBuilder of its own: a run registers callbacks into its builder that point
    at objects of that run, which a second run on the same builder would call after they are gone.
    (llvmlite never frees what a builder allocates for those callbacks, about 75 KiB at O3: see
    jaxcore_wasm.worker, which bounds how many compiles one process runs.)
    """
    import llvmlite.binding as llvm

    tm = target_machine(codegen_opt)
    ctx = llvm.create_context()
    mod = llvm.parse_assembly(text, context=ctx)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=opt)
    pto.loop_vectorization = opt >= 2
    pto.slp_vectorization = opt >= 2
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    # The vectoriser widens a rare-path call (builtins: sin/cos of |x| > 2^20) into a call of its
    # masked vector variant; inlining that afterwards leaves the common path one mask test.
    post = llvm.create_new_module_pass_manager()
    post.add_always_inliner_pass()
    post.run(mod, llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=opt)))
    obj = tm.emit_object(mod)
    return bytes(obj), str(mod)
