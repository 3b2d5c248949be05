"""Registration validates eagerly: a broken workflow fails at import, with a clear message."""

from __future__ import annotations

import re

import pytest

from engine_core import (Registry, RegistrationError, RetryPolicy, UnknownWorkflowError, map_, parallel, sleep, step,
                         workflow)
from engine_core.registry import build_workflow


def a(ctx):
    return {}


def b(ctx):
    return {}


async def fetch(ctx):
    return {}


def rows(ctx):
    yield {}


def test_workflow_registers_steps_in_order_with_policies(registry):
    @workflow("orders", registry=registry)
    class Orders:
        steps = [a, step(b, retry=RetryPolicy(max_attempts=7), timeout_s=5), sleep(minutes=2), step(a, name="a_again")]
        retry = RetryPolicy(max_attempts=4, base=2, max_delay=60)

    wf = registry.get("orders")
    assert [s.name for s in wf.steps] == ["a", "b", "sleep_120s", "a_again"]
    assert wf.policy_for(0).max_attempts == 4 and wf.policy_for(1).max_attempts == 7
    assert wf.timeout_for(1) == 5 and wf.timeout_for(0) is None  # None: the default derived from the worker timeout
    assert wf.steps[2].sleep_s == 120
    assert Orders.__loom_workflow__ is wf


@pytest.mark.parametrize("steps, message", [
    ([], "has no steps"),
    (None, "declare `steps"),
    ([a, a], "used at positions 0 and 1"),
    ([a, "b"], "not a callable"),
    ([a, 3], "not a callable"),
    ([step(a, name="has space")], "no '#' and no whitespace"),
    ([step(a, name="x#y")], "no '#' and no whitespace"),
    ([lambda ctx: {}], "no usable name"),
    ([a, sleep(seconds=10)], "ends with a sleep"),
    ([sleep(seconds=0), a], "more than 0 s and at most 366 days"),
    ([step(a, timeout_s=901)], "timeout_s"),
    ([step(a, name="step\n")], "no '#' and no whitespace"),
    ([step(a, name="\nstep")], "no '#' and no whitespace"),
    ([a, fetch], r"step at position 1 \('fetch'\) is async; .*asyncio.run"),
    ([rows], r"step at position 0 \('rows'\) yields; .*return a list"),
    ([step(a, compensate=fetch)], r"the compensation of step 'a' \('fetch'\) is async"),
    ([map_(fetch, over="xs")], r"a branch of the map at position 0 \('fetch'\) is async"),
    ([parallel(a, rows)], r"a branch of the parallel at position 0 \('rows'\) yields"),
])
def test_invalid_definitions_raise_at_registration(registry, steps, message):
    with pytest.raises(RegistrationError, match=message):
        workflow("bad", registry=registry)(type("Bad", (), {"steps": steps}))
    assert "bad" not in registry
    with pytest.raises(RegistrationError, match=message):
        build_workflow("bad", steps)


@pytest.mark.parametrize("name", ["", "a b", "x#y", "x" * 129, "caf\u00e9", None, "wf\n", "wf\r\n", "\nwf"])
def test_invalid_workflow_names_are_refused(registry, name):
    with pytest.raises(RegistrationError, match="invalid"):
        workflow(name, registry=registry)


def test_the_same_name_registered_twice_is_refused(registry):
    @workflow("twice", registry=registry)
    class One:
        steps = [a]

    with pytest.raises(RegistrationError, match="registered twice"):
        @workflow("twice", registry=registry)
        class Two:
            steps = [b]


def test_duplicate_sleeps_get_distinct_names(registry):
    wf = build_workflow("s", [a, sleep(seconds=5), b, sleep(seconds=5), step(a, name="c")])
    assert [s.name for s in wf.steps] == ["a", "sleep_5s", "b", "sleep_5s_2", "c"]


def test_unknown_workflow_lists_the_registered_ones(registry):
    registry.register(build_workflow("known", [a]))
    with pytest.raises(UnknownWorkflowError, match="registered workflows: known"):
        registry.get("nope")


def test_fingerprint_changes_with_steps_not_with_retry_policy():
    base = build_workflow("f", [a, b])
    assert build_workflow("f", [a, b], retry=RetryPolicy(max_attempts=9)).fingerprint == base.fingerprint
    assert build_workflow("f", [b, a]).fingerprint != base.fingerprint
    assert build_workflow("f", [a, sleep(seconds=5), b]).fingerprint != base.fingerprint


def test_entry_points_load_installed_workflow_packages(monkeypatch):
    # given: an installed distribution declaring a loom.workflows entry point
    from importlib import metadata

    loaded = []

    class FakeEntryPoint:
        name, value, dist = "demo", "demo_pkg", None

        def load(self):
            loaded.append(self.name)

    monkeypatch.setattr("engine_core.registry.entry_points", lambda group: [FakeEntryPoint()] if group == "loom.workflows" else [])
    registry = Registry()
    # when / then: loaded once, not twice
    assert registry.load_entry_points() == ["demo"]
    assert registry.load_entry_points() == []
    assert loaded == ["demo"]
    assert metadata  # the real lookup is exercised by the Lambda packages' tests


def test_a_workflow_package_that_fails_to_import_names_itself(monkeypatch):
    class Broken:
        name, value, dist = "broken", "broken_pkg", None

        def load(self):
            raise ImportError("No module named 'requests'")

    monkeypatch.setattr("engine_core.registry.entry_points", lambda group: [Broken()])
    with pytest.raises(RegistrationError, match="broken_pkg.*failed to import.*requests"):
        Registry().load_entry_points()


def test_retry_policy_validates_its_ranges():
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError, match="max_delay"):
        RetryPolicy(base=10, max_delay=5)
    with pytest.raises(ValueError):
        RetryPolicy(multiplier=0.5)


def test_names_with_a_trailing_newline_are_refused_everywhere(registry):
    # `$` matches before a final newline; the checks must match the whole name
    with pytest.raises(RegistrationError, match="invalid"):
        build_workflow("wf\n", [a])
    with pytest.raises(RegistrationError, match=re.escape("step name 'step\\n'")):
        build_workflow("wf", [step(a, name="step\n")])
    assert "wf" not in registry and "wf\n" not in registry


def test_versions_of_one_workflow_register_side_by_side_and_get_without_a_version_is_the_newest(registry):
    # given: versions 1 and 3 of one workflow, registered out of order
    @workflow("orders", registry=registry, version=3)
    class Three:
        steps = [a, b]

    @workflow("orders", registry=registry)
    class One:
        steps = [a]

    # then: the newest answers a plain get; each version answers for itself; a missing one is named
    assert registry.get("orders").version == 3 and registry.get("orders", 1).version == 1
    assert registry.versions("orders") == [1, 3] and registry.names() == ["orders"]
    assert [(w.name, w.version) for w in registry.all_versions()] == [("orders", 1), ("orders", 3)]
    assert [w.version for w in registry.all()] == [3]
    with pytest.raises(UnknownWorkflowError, match=r"has no version 2 deployed here \(deployed versions: 1, 3\)"):
        registry.get("orders", 2)
    # each step's digest depends on its name and shape only: the same step in two versions has the same one
    assert registry.get("orders", 1).step_prints[0] == registry.get("orders", 3).step_prints[0]
    assert len(set(registry.get("orders", 3).step_prints)) == 2


def test_versions_the_same_version_registered_twice_is_refused_and_a_bad_version_fails_at_import(registry):
    @workflow("orders", registry=registry, version=2)
    class First:
        steps = [a]

    with pytest.raises(RegistrationError, match=r"version 2 is registered twice.*version=N\+1"):
        @workflow("orders", registry=registry, version=2)
        class Second:
            steps = [b]
    for bad in (0, -1, True, "2", 1.5):
        with pytest.raises(RegistrationError, match="version must be an integer from 1"):
            workflow("orders", registry=registry, version=bad)


def _flows_module(folder, name: str, body: str):
    """A module ``name`` written in ``folder`` (two step functions, ``one`` and ``two``, then ``body``), imported."""
    import importlib.util

    path = folder / f"{name}.py"
    path.write_text("from engine_core import Registry, workflow\n"
                    "def one(ctx):\n    return {}\ndef two(ctx):\n    return {}\n" + body)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_package_with_its_own_registry_is_served_like_one_on_the_default(monkeypatch, tmp_path):
    # given: two installed workflow packages written as their tests like them, each with its own
    # ``registry = Registry()``: one whose entry point names the module, one naming the registry object
    module = _flows_module(tmp_path, "own_registry_flows", (
        "registry = Registry()\n"
        "@workflow('own_module', registry=registry)\nclass Own:\n    steps = [one]\n"
        "@workflow('own_module', version=2, registry=registry)\nclass OwnTwo:\n    steps = [one, two]\n"))
    other = Registry()
    other.register(build_workflow("own_object", [a], source="pkg.flows"))

    class Entry:
        dist = None

        def __init__(self, name, value, obj):
            self.name, self.value, self.obj = name, value, obj

        def load(self):
            return self.obj

    monkeypatch.setattr("engine_core.registry.entry_points", lambda group: [
        Entry("a", "own_registry_flows", module), Entry("b", "pkg.flows:registry", other)])
    served = Registry()
    # when
    assert served.load_entry_points() == ["a", "b"]
    # then: every version of each is served; the packages' own registries are left as they were
    assert served.names() == ["own_module", "own_object"]
    assert served.versions("own_module") == [1, 2]
    assert served.registrations == 3 and module.registry.names() == ["own_module"]
    # and a registry never takes in itself, and a plain object brings nothing
    assert served.include(served) == [] and served.include(object()) == [] and served.registrations == 3


def test_a_modules_test_registry_does_not_conflict_with_what_it_registered_on_the_default(tmp_path):
    # given: a module that deploys 'billing' on the default registry and keeps a test variant of it
    module = _flows_module(tmp_path, "variant_flows", (
        "served = Registry()\n"
        "@workflow('billing', registry=served)\nclass Billing:\n    steps = [one, two]\n"
        "tests = Registry()\n"
        "@workflow('billing', registry=tests)\nclass BillingForTests:\n    steps = [one]\n"))
    target = module.served  # stands for the default registry the module registered on
    # when
    target.include(module)
    # then: the deployed definition stays; no "registered twice" refusal
    assert [s.name for s in target.get("billing").steps] == ["one", "two"]
    # and a registry named directly still conflicts loudly, as two packages registering one name do
    with pytest.raises(RegistrationError, match="registered twice"):
        target.include(module.tests)


@pytest.mark.parametrize("call, message", [
    (lambda: sleep("5"), r"sleep\(\): seconds must be a number .*got '5'"),
    (lambda: sleep(hours=None), r"sleep\(\): hours must be a number .*got None"),
    (lambda: sleep(minutes=True), r"sleep\(\): minutes must be a number .*got True"),
    (lambda: __import__("engine_core").wait_for_event("approved", timeout="1h"),
     r"wait_for_event\('approved'\): timeout must be a number .*got '1h'"),
])
def test_a_sleep_or_a_wait_given_something_other_than_a_number_says_which_and_what_it_got(call, message):
    with pytest.raises(TypeError, match=message):
        call()
