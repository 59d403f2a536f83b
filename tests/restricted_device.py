"""Test-only devices: the cpu backend declaring less, so the suite runs on real restrictions.

Registered by tests/conftest.py (never installed, so `jaxcore devices` outside the tests does not
list them):

- ``cpu-float32`` declares only float32 (not even bool or int32) and two routines, one of them
  also in `unsupported_ops`, besides Erf<float32>. Index arithmetic is int32 on every device (see
  `Capabilities`), so it still runs every float32 kernel, however its indices are computed.
- ``cpu-nobool`` declares float32 and int32 but not bool: comparisons are declared by their
  operands' dtype, so float32 and int32 comparisons run. Idiv<int32> is in `unsupported_ops`
  (index arithmetic still divides: it is not governed by declarations), and Sort<int32> too.

On both, the suite's `unsupported` cases check every undeclared dtype, `unsupported_ops` pair and
undeclared routine, and every other case must honour the declarations (run what is declared, skip
what is not).
"""

from __future__ import annotations

import jaxcore
from jaxcore.alu import AluOp
from jaxcore.backend import Capabilities
from jaxcore.dtype import DType
from jaxcore.hookspecs import RegisterDevice
from jaxcore.routine import Routines

DEVICES: dict[str, Capabilities] = {
    "cpu-float32": Capabilities(
        dtypes=frozenset({DType.float32}),
        routines=frozenset({Routines.Sort, Routines.Cholesky}),
        max_args=8,
        unsupported_ops=frozenset({(AluOp.Erf, DType.float32), (Routines.Cholesky, DType.float32)}),
        description="test-only: the cpu reference declaring float32 only; Sort, Cholesky; "
        "not Erf<float32>, Cholesky<float32>",
    ),
    "cpu-nobool": Capabilities(
        dtypes=frozenset({DType.float32, DType.int32}),
        routines=frozenset({Routines.Sort, Routines.Argsort}),
        max_args=8,
        unsupported_ops=frozenset({(AluOp.Idiv, DType.int32), (Routines.Sort, DType.int32)}),
        description="test-only: the cpu reference declaring float32 and int32, no bool; Sort, Argsort; "
        "not Idiv<int32>, Sort<int32>",
    ),
}


def _factory(name: str, caps: Capabilities) -> jaxcore.hookspecs.BackendFactory:
    def create() -> jaxcore.Backend:
        from jaxcore_cpu.backend import CpuBackend

        backend_type = type("RestrictedCpuBackend", (CpuBackend,), {"name": name, "capabilities": caps})
        return backend_type()

    return create


@jaxcore.hookimpl
def jaxcore_register_devices(register: RegisterDevice) -> None:
    for name, caps in DEVICES.items():
        register(
            name,
            _factory(name, caps),
            api_version=1,
            priority=-100,
            plugin="jaxcore-test-restricted",
            version="test",
        )
