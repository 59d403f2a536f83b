"""The C backend: host buffers, kernels as C built by the system compiler, routines on the host.

A kernel goes through the core's lowering unchanged: `tune_nullopt` (views become index arithmetic),
`program.build_program` (the serial strategies, legalized with `C_TRAITS`), and the C dialect's
`render_program`. The shared library is cached on disk under `cache_dir/c`, named by a digest of
the C source, the compiler command and `lowering_digest()`, so a second run compiles nothing.
Routines run through the core's numpy reference (`run_routine`), which every routine has.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from jaxcore.plugin import (
    COMPOSED_ROUTINES,
    BaseBackend,
    Capabilities,
    DeviceUnavailable,
    DType,
    Executable,
    HostMemory,
    Kernel,
    Routine,
    Routines,
    current_settings,
    lowering_digest,
    program,
    run_routine_on_buffers,
    tune_nullopt,
)
from jaxcore_c import __version__
from jaxcore_c.dialect import C_TRAITS, CLanguage

# No -ffast-math; no contraction of a * b + c into one rounding (aarch64 gcc contracts by default).
FLAGS = ("-O2", "-shared", "-fPIC", "-ffp-contract=off")
_ENTRY = "jc_kernel"
_Kernel = Any  # the ctypes function of one compiled kernel


class CBackend(HostMemory, BaseBackend):  # storage: a bytearray per buffer (HostMemory)
    name = "c"
    capabilities = Capabilities(
        dtypes=frozenset(DType),
        routines=frozenset(Routines) - COMPOSED_ROUTINES,  # those run as the core's kernels
        max_args=64,
        description="C kernels built by the system compiler (cc -O2), run through ctypes; host routines",
    )

    def __init__(self) -> None:
        cc = current_settings().plugin("c").get("cc", "cc")  # JAXCORE_C_CC picks another compiler
        path = shutil.which(cc)
        if path is None:
            raise DeviceUnavailable(f"no C compiler {cc!r} on PATH", "install gcc, or set JAXCORE_C_CC")
        super().__init__()
        self._command = (path, *FLAGS)
        self._lang = CLanguage()  # one instance: it keeps the generated transcendental helpers
        self._cache = Path(current_settings().cache_dir) / "c"

    # ---- compile ----
    def _compile_kernel(self, kernel: Kernel) -> _Kernel:
        tune = tune_nullopt(kernel)
        prog = program.build_program(kernel, tune, C_TRAITS, name=_ENTRY)
        return self._load(self._build(self._lang.render_program(prog)))

    def _compile_routine(self, routine: Routine) -> None:
        return None  # the host reference runs every routine

    def _build(self, source: str) -> Path:
        """The shared library of `source`, from the disk cache or compiled into it."""
        key = "\0".join([source, *self._command, lowering_digest(), __version__])
        lib = self._cache / f"{hashlib.blake2b(key.encode(), digest_size=16).hexdigest()}.so"
        if lib.exists():
            return lib
        self._cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self._cache) as tmp:
            c_file, so = Path(tmp) / "kernel.c", Path(tmp) / "kernel.so"
            c_file.write_text(source)
            proc = subprocess.run(
                [*self._command, "-o", str(so), str(c_file), "-lm"], capture_output=True, text=True
            )
            if proc.returncode != 0:
                raise RuntimeError(f"{self._command[0]} failed:\n{proc.stderr}\n--- source ---\n{source}")
            os.replace(so, lib)  # atomic: a concurrent process sees the whole library or none
        return lib

    @staticmethod
    def _load(lib: Path) -> _Kernel:
        fn = ctypes.CDLL(str(lib))[_ENTRY]
        fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_uint64)]
        fn.restype = None
        return fn

    # ---- run ----
    def _run(self, exe: Executable, inputs: list[bytearray], outputs: list[bytearray]) -> None:
        src = exe.source
        if isinstance(src, Routine):
            run_routine_on_buffers(src, inputs, outputs)
            return
        bufs = [*inputs, *outputs]
        arrays = [np.frombuffer(b, np.uint8) for b in bufs]  # kept alive across the call
        ptrs = (ctypes.c_void_p * len(bufs))(*(a.ctypes.data for a in arrays))
        sizes = (ctypes.c_uint64 * len(bufs))(*(len(b) for b in bufs))
        exe.data(ptrs, sizes)
