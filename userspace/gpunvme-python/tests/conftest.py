# SPDX-License-Identifier: MIT OR GPL-2.0-only
"""Shared test setup.

Tests marked ``device`` need a gpunvme node: GPUNVME_TEST_DEVICE names it
(the VM's tests/vm/python_test.sh sets it, with GPUNVME_BDF and
GPUNVME_CLI); without it they are left out, and the rest runs on the host
(tests/userspace/python.sh test, in make check).

Reporting: a closing "python: N passed, N failed[, N skipped]" line for
make check's counter, and with GPUNVME_TAP=1 one TAP line per test and a
plan, for the VM runner.
"""

from __future__ import annotations

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)


TAP = os.environ.get("GPUNVME_TAP") == "1"
# Each test's outcome (nodeid -> (state, detail)), in the order they ran.
_outcomes: dict[str, tuple[str, str]] = {}
_config = None


def pytest_configure(config):
    global _config
    _config = config
    config.addinivalue_line("markers", "device: needs a gpunvme device (GPUNVME_TEST_DEVICE)")


def pytest_collection_modifyitems(config, items):
    # Without a device the device tests are left out (deselected, not
    # skipped): they run in the VM's own boot, not here.
    if os.environ.get("GPUNVME_TEST_DEVICE"):
        return
    device = [i for i in items if "device" in i.keywords]
    if device:
        config.hook.pytest_deselected(items=device)
        items[:] = [i for i in items if "device" not in i.keywords]


def _tap_line(nodeid: str) -> None:
    if not TAP:
        return
    state, detail = _outcomes[nodeid]
    n = list(_outcomes).index(nodeid) + 1
    name = nodeid.replace("#", "")
    if state == "failed":
        line = f"not ok {n} {name} (failed in {detail})"
    elif state == "skipped":
        line = f"ok {n} {name} # SKIP {detail}"
    else:
        line = f"ok {n} {name}"
    # Through the terminal reporter: outside pytest's output capture, and
    # on a line of its own after the progress characters.
    tr = _config.pluginmanager.get_plugin("terminalreporter")
    tr.write("\n" + line + "\n", flush=True)


def pytest_runtest_logreport(report):
    state, _ = _outcomes.setdefault(report.nodeid, ("passed", ""))
    if report.failed:
        _outcomes[report.nodeid] = ("failed", report.when)
    elif report.skipped and state != "failed":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _outcomes[report.nodeid] = ("skipped", reason)
    if report.when == "teardown":
        _tap_line(report.nodeid)


def pytest_collectreport(report):
    # A test file that fails to import counts as a failure.
    if report.failed:
        _outcomes[report.nodeid] = ("failed", "collection")
        _tap_line(report.nodeid)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    states = [s for s, _ in _outcomes.values()]
    passed, failed, skipped = (states.count(s) for s in ("passed", "failed", "skipped"))
    if TAP:
        terminalreporter.write_line(f"1..{len(states)}")
    line = f"python: {passed} passed, {failed} failed"
    if skipped:
        line += f", {skipped} skipped"
    terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def device_path() -> str:
    path = os.environ.get("GPUNVME_TEST_DEVICE")
    if not path:
        pytest.skip("no gpunvme device")
    return path


@pytest.fixture
def dev(device_path):
    import gpunvme

    d = gpunvme.open(device_path)
    yield d
    d.close()


@pytest.fixture
def ns(dev):
    n = dev.namespace()
    yield n
    n.close()
