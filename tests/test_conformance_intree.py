"""The shipped conformance suite, collected by this repo's own `pytest` run.

Every case of `jaxcore.conformance` is re-exported here, so `pytest` (or `make test`) runs it on
every in-tree device: tests/conftest.py loads the plugin, selects ``--jaxcore-device=all`` and, with
``CI=true``, requires each device under plugins/. It also runs on the test-only devices ``cpu-float32``
and ``cpu-nobool`` (tests/restricted_device.py), so every case is seen honouring real restrictions.
Case ids carry the device: ``test_binary[wasm-Add-int32]``.
"""

from __future__ import annotations

import jaxcore.conformance

globals().update(jaxcore.conformance.cases())
