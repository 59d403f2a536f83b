"""pytest plugin: run the conformance cases once per selected jaxcore device, and report per area.

Loaded through the ``pytest11`` entry point ``jaxcore`` when jaxcore is installed (so
``pytest --pyargs jaxcore.conformance --jaxcore-device=NAME`` just works), or with
``-p jaxcore.conformance.plugin`` from a checkout that is not installed. Do not pass ``-p`` when the
entry point is installed: pytest would register the module twice.

Options:

- ``--jaxcore-device=NAME[,NAME...]`` or ``all`` (the default): the devices the `backend` fixture is
  parametrised over (test ids are the device names). A named device that is not ready ends the
  session with the registry's reason and fix, never a silent skip. ``all`` means every ready
  device; the ones that are not ready are listed with their reason in the summary.
- ``--jaxcore-require=NAME[,NAME...]``: devices that must be ready even under ``all`` (CI).
- ``--jaxcore-reference=NAME``: the device `test_differential` compares against (see `reference_name`).
- ``--jaxcore-max-examples=N``: Hypothesis examples per differential case (default 60).
- ``--jaxcore-report=FILE``: write a JSON report: per area and device the counts, and per case its
  id, outcome (passed, failed, unsupported-declared, skipped, known-failing) and message.
- ``--jaxcore-known-failures=FILE``: case ids (one per line, ``#`` comments, ``*`` wildcards) a
  plugin knows it fails while it works toward conformance. They run as non-strict xfails: the
  summary lists them as known-failing, never as passed, and names any that now pass.

A case's id is ``AREA::FUNCTION[PARAMS]``, e.g. ``ops::test_binary[mydev-Add-int32]``: the same
however the suite is collected (``--pyargs`` or re-exported into a project's tests).

A failing case is reported short (under pytest's default ``--tb=auto``): the case, the kernel or
routine it ran, the mismatching elements with their inputs, expected and got values, and a
one-line command that reruns just that case. ``--tb=long`` (or any explicit style) gives pytest's
own traceback.

Only tests defined in ``jaxcore.conformance.test_*`` modules (wherever they are re-exported) or
marked ``@pytest.mark.jaxcore`` are parametrised, so the plugin leaves other projects' tests and
their own `backend` fixtures alone; it creates no device unless such a test is collected or a
device is named on the command line.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from jaxcore.conformance import AREAS, harness
from jaxcore.conformance.harness import UNSUPPORTED

if TYPE_CHECKING:
    from jaxcore.backend import Backend

PACKAGE = "jaxcore.conformance"
DEFAULT_MAX_EXAMPLES = 60
_RANK = {"passed": 0, "skipped": 1, "unsupported": 2, "known": 3, "failed": 4}
_OUTCOME_NAMES = {"unsupported": UNSUPPORTED, "known": "known-failing"}
_SOURCE_CHARS = 800  # a kernel's printed expression is cut here in a failure report


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("jaxcore", "jaxcore conformance suite")
    group.addoption(
        "--jaxcore-device",
        dest="jaxcore_device",
        default=None,
        metavar="NAME[,NAME...]|all",
        help="devices to run the conformance suite on (default: all ready devices)",
    )
    group.addoption(
        "--jaxcore-require",
        dest="jaxcore_require",
        default=None,
        metavar="NAME[,NAME...]",
        help="devices that must be ready (fail the session otherwise), e.g. every in-tree device in CI",
    )
    group.addoption(
        "--jaxcore-reference",
        dest="jaxcore_reference",
        default=None,
        metavar="NAME",
        help="reference device for differential tests (default: the device declaring reference=True)",
    )
    group.addoption(
        "--jaxcore-max-examples",
        dest="jaxcore_max_examples",
        type=int,
        default=None,
        metavar="N",
        help=f"Hypothesis examples per differential test (default {DEFAULT_MAX_EXAMPLES})",
    )
    group.addoption(
        "--jaxcore-report",
        dest="jaxcore_report",
        default=None,
        metavar="FILE",
        help="write a JSON report (per area and device, and per case with messages) to FILE",
    )
    group.addoption(
        "--jaxcore-known-failures",
        dest="jaxcore_known_failures",
        default=None,
        metavar="FILE",
        help="case ids (AREA::FUNCTION[PARAMS], * wildcards, # comments) expected to fail: "
        "reported as known-failing, never as passed",
    )


def _names(raw: str | None) -> list[str]:
    return list(dict.fromkeys(p.strip() for p in (raw or "").split(",") if p.strip()))


def is_case(fn: Callable[..., Any] | None) -> bool:
    """A conformance case: defined in a `jaxcore.conformance.test_*` module or marked `jaxcore`."""
    if fn is None:
        return False
    if getattr(fn, "__module__", "").startswith(f"{PACKAGE}.test_"):
        return True
    return any(m.name == "jaxcore" for m in getattr(fn, "pytestmark", ()))


def area_of(fn: Callable[..., Any]) -> str:
    mod = getattr(fn, "__module__", "")
    return mod.rsplit(".test_", 1)[1] if mod.startswith(f"{PACKAGE}.test_") else "custom"


@dataclass
class _State:
    """What this session selected, why devices are missing, and every case's outcome."""

    config: pytest.Config
    devices: list[str] | None = None
    unavailable: dict[str, str] = field(default_factory=dict)
    reference: tuple[str, str] | None = None
    cases: dict[str, tuple[str, str]] = field(default_factory=dict)
    outcomes: dict[str, str] = field(default_factory=dict)
    case_ids: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    rerun: dict[str, str] = field(default_factory=dict)
    known: list[re.Pattern[str]] | None = None
    known_now_pass: list[str] = field(default_factory=list)

    def known_failures(self) -> list[re.Pattern[str]]:
        """The patterns of `--jaxcore-known-failures` (read once; a missing file ends the session)."""
        if self.known is None:
            path = self.config.getoption("jaxcore_known_failures")
            self.known = []
            if path:
                try:
                    text = Path(path).read_text()
                except OSError as exc:
                    pytest.exit(f"jaxcore conformance: --jaxcore-known-failures: {exc}", returncode=4)
                for line in text.splitlines():
                    line = line.split("#", 1)[0].strip()
                    if line:  # literal but for `*`: ids are full of [ ] that fnmatch would read as sets
                        self.known.append(re.compile(".*".join(map(re.escape, line.split("*")))))
        return self.known

    def resolve(self) -> list[str]:
        """The selected devices, initialised; ends the session (usage error) if one is not ready or
        the suite's own requirements (scipy, hypothesis) are not installed."""
        if self.devices is not None:
            return self.devices
        missing = harness.missing_requirements()
        if missing:
            pytest.exit(f"jaxcore conformance: {harness.requirements_message(missing)}", returncode=4)
        import jaxcore

        spec = self.config.getoption("jaxcore_device") or "all"
        required = _names(self.config.getoption("jaxcore_require"))
        errors: list[str] = []
        if spec.strip() == "all":
            try:
                ready = jaxcore.init()
            except Exception as exc:  # e.g. JAXCORE_DEVICES names an unknown device
                pytest.exit(f"jaxcore conformance: cannot initialise devices: {exc}", returncode=4)
            for info in jaxcore.device_info():
                if info.name not in ready:
                    self.unavailable[info.name] = _why(info)
            failed = _plugin_failures()
            for plugin, why in failed.items():
                self.unavailable.setdefault(f"plugin:{plugin}", why)
            for name in required:
                if name not in ready:
                    errors.append(self.unavailable.get(name) or _unregistered(name, failed))
            names = ready
            if not names:
                errors.append(
                    "no jaxcore device is ready: " + ("; ".join(self.unavailable.values()) or "none")
                )
        else:
            names = _names(spec)
            for name in dict.fromkeys([*names, *required]):
                not_ready = _check_ready(name)
                if not_ready:
                    errors.append(not_ready)
        if errors:
            pytest.exit(
                "jaxcore conformance: requested device not available:\n  " + "\n  ".join(errors), returncode=4
            )
        self.devices = names
        return names

    def reference_name(self) -> tuple[str, str]:
        """The differential reference: `--jaxcore-reference`, else `jaxcore.reference_backend()` if the
        registry has it, else the device whose capabilities say `reference=True` (searched from the
        lowest priority up), else the lowest-priority ready device. Returns (name, how it was chosen)."""
        if self.reference is not None:
            return self.reference
        opt = self.config.getoption("jaxcore_reference")
        if opt:
            why = _check_ready(opt)
            if why:
                pytest.exit(f"jaxcore conformance: --jaxcore-reference: {why}", returncode=4)
            self.reference = (opt, "--jaxcore-reference")
            return self.reference
        chosen = harness.default_reference()
        if chosen is None:
            pytest.exit(
                "jaxcore conformance: no ready device to use as the differential reference", returncode=4
            )
        self.reference = chosen
        return self.reference


def _why(info: Any) -> str:
    msg = f"{info.name}: {info.status}"
    if info.reason:
        msg += f": {info.reason}"
    if info.hint:
        msg += f" (fix: {info.hint})"
    return msg


def _plugin_failures() -> dict[str, str]:
    """Plugins that failed to load, with the registry's error and fix (their devices never registered)."""
    import jaxcore

    return {
        p.name: f"plugin {p.name} ({p.module}) failed: {p.error}" + (f" (fix: {p.hint})" if p.hint else "")
        for p in jaxcore.plugin_info()
        if p.status == "error"
    }


def _unregistered(name: str, failed: dict[str, str]) -> str:
    msg = f"{name}: no plugin registered this device"
    return msg + ("; " + "; ".join(failed.values()) if failed else "")


def _check_ready(name: str) -> str | None:
    """None if device `name` is ready (initialising it), else the registry's reason and fix."""
    import jaxcore

    try:
        jaxcore.init([name])
        info = jaxcore.device_info(name)
    except ValueError as exc:  # unknown device: the message lists the known ones and failed plugins
        failed = _plugin_failures()
        return f"{name}: {exc}" + ("\n    " + "\n    ".join(failed.values()) if failed else "")
    return None if info.status == "ready" else _why(info)


_STATE = pytest.StashKey[_State]()


def state(config: pytest.Config) -> _State:
    return config.stash[_STATE]


# The session's state for hooks that are not handed the config (pytest_runtest_logreport).
_CURRENT: dict[str, _State] = {}


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_STATE] = _CURRENT["state"] = _State(config)
    config.addinivalue_line(
        "markers", "jaxcore: run this test once per selected jaxcore device (`backend` fixture)"
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    # An explicitly named or required device that is missing fails at once, before any collection.
    cfg = session.config
    if cfg.getoption("jaxcore_device") not in (None, "all") or cfg.getoption("jaxcore_require"):
        state(cfg).resolve()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames or not is_case(metafunc.function):
        return
    names = state(metafunc.config).resolve()
    metafunc.parametrize("backend", names, indirect=True, ids=names, scope="session")


@pytest.fixture(scope="session")
def backend(request: pytest.FixtureRequest) -> Backend:
    """The backend under test (one session-wide instance per device, from the registry)."""
    import jaxcore

    name = getattr(request, "param", None) or state(request.config).resolve()[0]
    return jaxcore.get_backend(name)


@pytest.fixture(scope="session")
def reference_backend(request: pytest.FixtureRequest) -> Backend:
    """The device whose results the differential tests treat as right (see `_State.reference_name`)."""
    import jaxcore

    return jaxcore.get_backend(state(request.config).reference_name()[0])


@pytest.fixture(scope="session")
def max_examples(request: pytest.FixtureRequest) -> int:
    n = request.config.getoption("jaxcore_max_examples")
    return DEFAULT_MAX_EXAMPLES if n is None else max(1, int(n))


_PROPERTY = "jaxcore_case"  # (area, device) rides on each report, so xdist workers' results count too


def case_id(item: pytest.Item) -> str:
    """``AREA::FUNCTION[PARAMS]``: a case's name however the suite was collected."""
    fn = getattr(item, "function", None)
    callspec = getattr(item, "callspec", None)
    params = f"[{callspec.id}]" if callspec is not None else ""
    return f"{area_of(fn) if fn is not None else 'custom'}::{getattr(fn, '__name__', item.name)}{params}"


def rerun_command(item: pytest.Item, device: str) -> str:
    """One command line that runs just this case again (from the directory the suite ran in)."""
    from jaxcore.conformance import plugin_autoloaded

    args = [sys.executable, "-m", "pytest", f"{item.path}::{item.name}"]
    if not plugin_autoloaded() and Path(item.path).parent == Path(__file__).parent:
        args[3:3] = ["-p", "jaxcore.conformance.plugin"]  # the suite's own files, not installed
    if device != "suite":
        args.append(f"--jaxcore-device={device}")
    return shlex.join(args)


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    st = state(config)
    known = st.known_failures()
    source = config.getoption("jaxcore_known_failures")
    for item in items:
        fn = getattr(item, "function", None)
        if not is_case(fn):
            continue
        callspec = getattr(item, "callspec", None)
        device = callspec.params.get("backend", "suite") if callspec is not None else "suite"
        cid = case_id(item)
        item.user_properties.append(
            (_PROPERTY, (area_of(fn) if fn is not None else "custom", str(device), cid))
        )
        st.rerun[item.nodeid] = rerun_command(item, str(device))
        if any(pat.fullmatch(cid) or pat.fullmatch(item.nodeid) for pat in known):
            item.add_marker(pytest.mark.xfail(reason=f"known-failing (listed in {source})", strict=False))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    harness.forget_source()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if call.excinfo is None or not report.failed or not is_case(getattr(item, "function", None)):
        return
    if item.config.getoption("tbstyle", "auto") != "auto":
        return
    report.longrepr = failure_report(item, call.excinfo, state(item.config).rerun.get(item.nodeid))


def failure_report(item: pytest.Item, excinfo: pytest.ExceptionInfo[BaseException], rerun: str | None) -> str:
    """The case, what it ran, what differed, how to rerun it: no helper source."""
    lines = [f"case: {case_id(item)}"]
    doc = (getattr(getattr(item, "function", None), "__doc__", None) or "").strip()
    if doc:
        lines.append("  " + " ".join(doc.split())[:300])
    source = harness.last_source()
    if source is not None:
        text = str(source)
        if len(text) > _SOURCE_CHARS:
            text = text[:_SOURCE_CHARS] + f" ... ({len(text) - _SOURCE_CHARS} more characters)"
        kind = "kernel" if hasattr(source, "exp") else "routine"
        lines.append(f"{kind}: " + text.replace("\n", "\n  "))
    exc = excinfo.value
    if isinstance(exc, AssertionError):
        lines.append(str(exc) or "assertion failed")
        where = excinfo.traceback[-1] if excinfo.traceback else None
        if where is not None and not str(where.path).endswith("harness.py"):
            lines.append(f"  (at {where.path}:{where.lineno + 1})")
    else:
        lines.append(f"{type(exc).__name__}: {exc}")
        code = getattr(getattr(item, "function", None), "__code__", None)
        tb = excinfo.traceback
        start = next((i for i, entry in enumerate(tb) if entry.frame.code.raw is code), 0)
        excinfo.traceback = tb[start:]  # from the case down: pytest's own frames say nothing
        lines.append(str(excinfo.getrepr(style="short", chain=False)))
    if rerun:
        lines.append(f"rerun: {rerun}")
    return "\n".join(lines)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    st = _CURRENT.get("state")
    found = next((v for k, v in report.user_properties if k == _PROPERTY), None)
    key = cast("tuple[str, ...] | None", found)
    if st is None or key is None:
        return
    message = ""
    if report.failed:
        outcome = "failed"
        message = str(report.longrepr)
    elif report.skipped and hasattr(report, "wasxfail"):
        outcome = "known"
        message = str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr)
    elif report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        outcome = "unsupported" if UNSUPPORTED in reason else "skipped"
        message = reason.removeprefix("Skipped: ")
    elif report.when == "call":
        outcome = "passed"
        if hasattr(report, "wasxfail"):
            st.known_now_pass.append(str(key[2]) if len(key) > 2 else report.nodeid)
    else:
        return
    st.cases[report.nodeid] = (str(key[0]), str(key[1]))
    if len(key) > 2:
        st.case_ids[report.nodeid] = str(key[2])
    prev = st.outcomes.get(report.nodeid)
    if prev is None or _RANK[outcome] > _RANK[prev]:
        st.outcomes[report.nodeid] = outcome
        st.messages[report.nodeid] = message


def report_data(st: _State) -> dict[str, Any]:
    """What `--jaxcore-report` writes: counts per area and device, then every case."""
    areas: dict[str, dict[str, dict[str, int]]] = {}
    cases = []
    for nodeid, outcome in st.outcomes.items():
        area, device = st.cases[nodeid]
        cell = areas.setdefault(area, {}).setdefault(device, {_OUTCOME_NAMES.get(k, k): 0 for k in _RANK})
        cell[_OUTCOME_NAMES.get(outcome, outcome)] += 1
        cases.append(
            {
                "id": st.case_ids.get(nodeid, nodeid),
                "nodeid": nodeid,
                "area": area,
                "device": device,
                "outcome": _OUTCOME_NAMES.get(outcome, outcome),
                "message": st.messages.get(nodeid, ""),
            }
        )
    return {
        "devices": list(st.devices or []),
        "areas": areas,
        "cases": cases,
        "known_failures_now_passing": st.known_now_pass,
        "unavailable": st.unavailable,
        "reference": st.reference[0] if st.reference else None,
    }


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = session.config.getoption("jaxcore_report", None)
    if path:
        Path(path).write_text(json.dumps(report_data(state(session.config)), indent=1) + "\n")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _CURRENT.get("state") is config.stash.get(_STATE, None):
        _CURRENT.pop("state", None)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    st = state(config)
    if not st.outcomes and not st.unavailable:
        return
    tr = terminalreporter
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for nodeid, outcome in st.outcomes.items():
        key = st.cases[nodeid]
        counts.setdefault(key, {k: 0 for k in _RANK})[outcome] += 1
    devices = list(st.devices or [])
    devices += sorted({d for _, d in counts if d not in devices})
    areas = [a for a in AREAS if any(k[0] == a for k in counts)]
    areas += sorted({a for a, _ in counts if a not in areas})
    tr.write_sep("=", "jaxcore conformance: passed / failed / unsupported-declared")
    width = max(14, *(len(a) + 2 for a in areas)) if areas else 14
    tr.write_line(f"{'area':<{width}}" + "".join(f"{d:>18}" for d in devices))
    totals = {d: {k: 0 for k in _RANK} for d in devices}
    for area in areas:
        row = f"{area:<{width}}"
        for d in devices:
            c = counts.get((area, d))
            if c is None:
                row += f"{'-':>18}"
                continue
            for k in c:
                totals[d][k] += c[k]
            row += f"{_cell(c):>18}"
        tr.write_line(row)
    tr.write_line(f"{'total':<{width}}" + "".join(f"{_cell(totals[d]):>18}" for d in devices))
    if any(t["skipped"] for t in totals.values()):
        tr.write_line("(+N s: skipped for another reason, e.g. a capability too small to test)")
    if any(t["known"] for t in totals.values()):
        tr.write_line("(+N k: known-failing, listed in --jaxcore-known-failures; not counted as passed)")
        for nodeid, outcome in st.outcomes.items():
            if outcome == "known":
                tr.write_line(f"known-failing: {st.case_ids.get(nodeid, nodeid)}", yellow=True)
    for cid in st.known_now_pass:
        tr.write_line(f"known failure now passes (remove it from the list): {cid}", green=True)
    if st.reference is not None:
        tr.write_line(f"differential reference: {st.reference[0]} ({st.reference[1]})")
    _describe_devices(tr, [d for d in devices if d != "suite"])
    for why in st.unavailable.values():
        tr.write_line(f"not available: {why}", yellow=True)


def _cell(c: dict[str, int]) -> str:
    text = f"{c['passed']}/{c['failed']}/{c['unsupported']}"
    text += f" +{c['known']}k" if c["known"] else ""
    return text + (f" +{c['skipped']}s" if c["skipped"] else "")


def _describe_devices(tr: Any, names: list[str]) -> None:
    import jaxcore

    for name in names:
        try:
            info = jaxcore.device_info(name)
        except Exception:
            continue
        caps = info.capabilities
        if caps is None:
            continue
        dtypes = ",".join(sorted(str(d) for d in caps.dtypes))
        routines = ",".join(sorted(str(r) for r in caps.routines)) or "none"
        tr.write_line(
            f"{name}: plugin {info.plugin} {info.version}; dtypes {dtypes}; routines {routines}; "
            f"max_args {caps.max_args}; unsupported_ops {len(caps.unsupported_ops)}; "
            f"declared tolerances {len(caps.tolerances)}"
            + (f"; quirks {','.join(caps.quirks)}" if caps.quirks else "")
        )
