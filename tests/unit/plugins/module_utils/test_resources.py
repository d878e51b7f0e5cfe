# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Resource-list algebra: examples plus properties (hypothesis)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import copy
from fractions import Fraction

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import BINARY_SI, DECIMAL_SI
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base import resources as r

Mi = 1024 ** 2
Gi = 1024 ** 3


def test_parse_and_format_resource_list():
    rl = r.parse_resource_list({"limits.cpu": "30", "limits.memory": "60Gi", "pods": 10, "requests.cpu": "4015m"})
    assert rl == {"limits.cpu": 30, "limits.memory": 60 * Gi, "pods": 10, "requests.cpu": Fraction(4015, 1000)}
    assert r.format_resource_list(rl) == {
        "limits.cpu": "30", "limits.memory": "60Gi", "pods": "10", "requests.cpu": "4015m"}
    assert list(r.format_resource_list({"b": 1, "a": 2})) == ["a", "b"]


def test_parse_resource_list_names_the_bad_entry():
    with pytest.raises(InputError) as info:
        r.parse_resource_list({"limits.memory": "5GB"}, "spec.hard")
    assert "'5GB' for spec.hard.limits.memory" in str(info.value)
    with pytest.raises(InputError):
        r.parse_resource_list(["limits.memory"])
    assert r.parse_resource_list(None) == {}


def test_format_resource_list_uses_given_formats():
    rl = {"requests.ephemeral-storage": Fraction(50 * 10 ** 6), "limits.memory": Fraction(6000 * Mi)}
    assert r.format_resource_list(rl) == {"limits.memory": "6000Mi", "requests.ephemeral-storage": "50000000"}
    assert r.format_resource_list(rl, {"requests.ephemeral-storage": DECIMAL_SI}) == {
        "limits.memory": "6000Mi", "requests.ephemeral-storage": "50M"}
    assert r.formats_of({"memory": "1Gi", "cpu": "2", "pods": 3}) == {"memory": BINARY_SI, "cpu": DECIMAL_SI}


@pytest.mark.parametrize("name, fmt", [
    ("memory", BINARY_SI), ("requests.memory", BINARY_SI), ("limits.memory", BINARY_SI),
    ("requests.storage", BINARY_SI), ("ephemeral-storage", BINARY_SI), ("limits.ephemeral-storage", BINARY_SI),
    ("hugepages-2Mi", BINARY_SI), ("requests.hugepages-1Gi", BINARY_SI),
    ("gold.storageclass.storage.k8s.io/requests.storage", BINARY_SI),
    ("cpu", DECIMAL_SI), ("limits.cpu", DECIMAL_SI), ("pods", DECIMAL_SI), ("count/pods", DECIMAL_SI),
    ("requests.nvidia.com/gpu", DECIMAL_SI), ("persistentvolumeclaims", DECIMAL_SI),
])
def test_default_format(name, fmt):
    assert r.default_format(name) == fmt


def test_examples_like_kubernetes():
    a = {"cpu": Fraction(1), "memory": Fraction(Gi)}
    b = {"cpu": Fraction(1, 2), "pods": Fraction(1)}
    assert r.add(a, b) == {"cpu": Fraction(3, 2), "memory": Gi, "pods": 1}
    assert r.subtract(a, b) == {"cpu": Fraction(1, 2), "memory": Gi, "pods": -1}
    assert r.maximum(a, b) == {"cpu": 1, "memory": Gi, "pods": 1}
    assert r.minimum(a, b) == {"cpu": Fraction(1, 2)}
    assert r.less_or_equal(b, a) == (True, [])  # pylint: disable=arguments-out-of-order
    assert r.less_or_equal(a, b) == (False, ["cpu"])
    assert r.less_or_equal({"cpu": 5}, {"memory": 1}) == (True, [])  # untracked names never block
    assert r.mask(a, ["cpu", "nothing"]) == {"cpu": 1}
    assert r.without(a, ["cpu"]) == {"memory": Gi}
    assert r.is_zero({}) and r.is_zero({"cpu": 0}) and not r.is_zero(a)
    assert r.remove_zeros({"cpu": 0, "pods": 1}) == {"pods": 1}
    assert r.is_negative({"cpu": -1, "pods": 1, "memory": -Gi}) == ["cpu", "memory"]
    assert r.clamp_negative({"cpu": -1, "pods": 1}) == {"cpu": 0, "pods": 1}
    assert r.equals(a, dict(a)) and not r.equals({"cpu": 0}, {})
    assert r.total([a, b, b]) == {"cpu": 2, "memory": Gi, "pods": 2}
    assert r.total([]) == {}
    assert r.multiply({"cpu": 2}, "1.1") == {"cpu": Fraction(11, 5)}
    assert r.intersection(["a", "b", "c"], ["c", "a"]) == ["a", "c"]
    assert r.difference(["a", "b", "c"], ["c"]) == ["a", "b"]
    assert r.resource_names({"b": 1, "a": 1}) == ["a", "b"]


# ---------------------------------------------------------------- properties

_names = st.sampled_from(["requests.cpu", "limits.cpu", "requests.memory", "limits.memory", "pods", "count/pods"])
_values = st.builds(Fraction, st.integers(-(10 ** 12), 10 ** 12), st.sampled_from([1, 1000, 10 ** 9]))
_lists = st.dictionaries(_names, _values, max_size=6)


def _same(a, b):
    """Equal per name, treating missing as zero."""
    return all(a.get(n, 0) == b.get(n, 0) for n in set(a) | set(b))


@settings(max_examples=200, deadline=None)
@given(_lists, _lists)
def test_add_is_commutative(a, b):
    assert r.add(a, b) == r.add(b, a)  # pylint: disable=arguments-out-of-order


@settings(max_examples=200, deadline=None)
@given(_lists, _lists, _lists)
def test_add_is_associative(a, b, c):
    assert r.add(r.add(a, b), c) == r.add(a, r.add(b, c))


@settings(max_examples=200, deadline=None)
@given(_lists, _lists)
def test_subtract_inverts_add(a, b):
    assert _same(r.subtract(r.add(a, b), b), a)
    assert _same(r.add(r.subtract(a, b), b), a)


@settings(max_examples=200, deadline=None)
@given(_lists, _lists)
def test_less_or_equal_agrees_with_subtract(a, b):
    fits, names = r.less_or_equal(a, b)
    room = r.mask(r.subtract(b, a), [n for n in b if n in a])  # pylint: disable=arguments-out-of-order
    assert fits == (not r.is_negative(room))
    assert names == r.is_negative(room)


@settings(max_examples=200, deadline=None)
@given(_lists, st.lists(_names))
def test_mask_is_idempotent(a, names):
    once = r.mask(a, names)
    assert r.mask(once, names) == once
    assert set(once) <= set(names)


@settings(max_examples=200, deadline=None)
@given(_lists, _lists)
def test_maximum_dominates(a, b):
    m = r.maximum(a, b)
    assert r.less_or_equal(a, m)[0] and r.less_or_equal(b, m)[0]
    assert set(m) == set(a) | set(b)


@settings(max_examples=200, deadline=None)
@given(_lists, _lists, st.lists(_names))
def test_inputs_are_never_mutated(a, b, names):
    a0, b0 = copy.deepcopy(a), copy.deepcopy(b)
    for fn in (r.add, r.subtract, r.maximum, r.minimum, r.less_or_equal, r.equals):
        fn(a, b)
    for fn in (r.is_zero, r.remove_zeros, r.is_negative, r.clamp_negative, r.resource_names):
        fn(a)
    r.mask(a, names)
    r.without(a, names)
    r.multiply(a, 3)
    r.total([a, b])
    r.format_resource_list(r.mask(a, ["pods", "count/pods"]))
    assert a == a0 and b == b0


@settings(max_examples=200, deadline=None)
@given(_lists)
def test_format_then_parse_round_trips(a):
    assert r.parse_resource_list(r.format_resource_list(a)) == a
