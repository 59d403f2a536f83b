"""jaxcore-wasm: kernels compiled to WebAssembly with llvmlite and run by wasmtime (device "wasm")."""

__version__ = "0.1.0"
