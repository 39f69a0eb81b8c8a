# SPDX-License-Identifier: MIT OR GPL-2.0-only
"""python/gpunvme/_native.pyi matches the built module: the same public
names, and for every function and method the same parameters (names,
kinds, which have defaults, and the defaults' values)."""

from __future__ import annotations

import ast
import inspect
import os

import gpunvme
from gpunvme import _native

STUB = os.path.join(os.path.dirname(gpunvme.__file__), "_native.pyi")
# Dunders a stub states (the runtime's others are Python's own).
DUNDERS = {"__init__", "__len__", "__enter__", "__exit__"}
# In the stub for type checkers (PEP 688), not a method on 3.11.
STUB_ONLY = {"__buffer__"}
REQUIRED = "<no default>"


def stub_tree():
    with open(STUB) as f:
        return ast.parse(f.read())


def stub_params(fn: ast.FunctionDef):
    """[(name, kind, default)] of a stub def, self dropped."""
    a = fn.args
    out = []
    pos = a.posonlyargs + a.args
    defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    for arg, d in zip(pos, defaults):
        kind = "POSITIONAL_ONLY" if arg in a.posonlyargs else "POSITIONAL_OR_KEYWORD"
        out.append((arg.arg, kind, REQUIRED if d is None else ast.literal_eval(d)))
    if a.vararg:
        out.append((a.vararg.arg, "VAR_POSITIONAL", REQUIRED))
    for arg, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append((arg.arg, "KEYWORD_ONLY", REQUIRED if d is None else ast.literal_eval(d)))
    if out and out[0][0] in ("self", "cls"):
        out = out[1:]
    return out


def runtime_params(obj):
    sig = inspect.signature(obj)
    out = []
    for p in sig.parameters.values():
        d = REQUIRED if p.default is inspect.Parameter.empty else p.default
        out.append((p.name, p.kind.name, d))
    if out and out[0][0] in ("self", "cls"):
        out = out[1:]
    return out


def public(names):
    return {n for n in names if not n.startswith("_") or n in DUNDERS}


def test_module_level_names_match():
    tree = stub_tree()
    stub = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            stub.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            stub.add(node.target.id)
    stub.discard("Buffer")  # the stub's own alias
    assert stub == public(dir(_native)) - {"__all__"}


def test_functions_and_methods_match():
    mismatches = []
    for node in stub_tree().body:
        if isinstance(node, ast.FunctionDef):
            got = runtime_params(getattr(_native, node.name))
            if stub_params(node) != got:
                mismatches.append((node.name, stub_params(node), got))
        if not isinstance(node, ast.ClassDef):
            continue
        cls = getattr(_native, node.name)
        members = {n.name: n for n in node.body if isinstance(n, ast.FunctionDef)}
        runtime = public(vars(cls)) - {"__init__"}
        if "__init__" in members:
            got = runtime_params(cls)
            if stub_params(members["__init__"]) != got:
                mismatches.append((node.name + ".__init__", stub_params(members["__init__"]), got))
        stubbed = set(members) - {"__init__"} - STUB_ONLY
        if stubbed != runtime:
            mismatches.append((node.name, sorted(stubbed ^ runtime), "names differ"))
            continue
        for name, fn in members.items():
            if name in STUB_ONLY or name == "__init__":
                continue
            attr = inspect.getattr_static(cls, name)
            is_prop = any(isinstance(d, ast.Name) and d.id == "property" for d in fn.decorator_list)
            if is_prop != (type(attr).__name__ == "getset_descriptor"):
                mismatches.append((f"{node.name}.{name}", "property?", is_prop))
            elif not is_prop and stub_params(fn) != runtime_params(getattr(cls, name)):
                mismatches.append((f"{node.name}.{name}", stub_params(fn), runtime_params(getattr(cls, name))))
    assert not mismatches, "\n".join(map(str, mismatches))


def test_every_public_name_of_the_package_is_exported_and_documented():
    for name in gpunvme.__all__:
        obj = getattr(gpunvme, name)
        if name != "GPU_ARRAYS":
            assert obj.__doc__, f"{name} has no docstring"
    assert set(gpunvme.__all__) == {n for n in dir(gpunvme) if not n.startswith("_")} - {
        n for n in dir(gpunvme) if not n.startswith("_") and inspect.ismodule(getattr(gpunvme, n))}
