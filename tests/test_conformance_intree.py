"""The shipped conformance suite, collected by this repo's own `pytest` run.

Every case of `jaxcore.conformance` is re-exported here, so `pytest` (or `make test`) runs it on
every in-tree device: tests/conftest.py loads the plugin, selects ``--jaxcore-device=all`` and, with
``CI=true``, requires each device under plugins/. Case ids carry the device: ``test_binary[wasm-Add-int32]``.
"""

from __future__ import annotations

import jaxcore.conformance

globals().update(jaxcore.conformance.cases())
