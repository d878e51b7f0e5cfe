# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Resource-list algebra, after k8s.io/apiserver pkg/quota/v1/resources.go.

A ResourceList is a plain dict mapping a resource name to an exact Fraction.
Every function is pure: it returns a new dict and never mutates its inputs.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from fractions import Fraction

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import (
    BINARY_SI,
    DECIMAL_SI,
    format_quantity,
    parse_quantity,
    parse_quantity_format,
)

_BINARY_BASES = ("memory", "storage", "ephemeral-storage")


def default_format(name):
    """BinarySI for memory, storage and hugepages names (any requests./limits./class prefix), else DecimalSI."""
    base = name.rsplit("/", 1)[-1]
    for prefix in ("requests.", "limits."):
        if base.startswith(prefix):
            base = base[len(prefix):]
    if base in _BINARY_BASES or base.startswith("hugepages-"):
        return BINARY_SI
    return DECIMAL_SI


def parse_resource_list(mapping, what=None):
    """A ResourceList from a mapping of names to quantities (str/int/float/Fraction); None gives {}."""
    if mapping is None:
        return {}
    if not isinstance(mapping, dict):
        raise InputError("%s must be a mapping of resource names to quantities, got %s"
                         % (what or "resource list", type(mapping).__name__),
                         "give it as {name: quantity}, e.g. {limits.memory: 6000Mi}")
    result = {}
    for name, value in mapping.items():
        label = "%s.%s" % (what, name) if what else str(name)
        result[str(name)] = parse_quantity(value, label)
    return result


def formats_of(mapping):
    """The format each quantity string in mapping was written in (names with non-string values are left out)."""
    return dict((str(k), parse_quantity_format(v, str(k))[1]) for k, v in (mapping or {}).items() if isinstance(v, str))


# (value, format) -> the text format_quantity printed: reports print the same few quantities thousands of times.
_FORMATTED = {}
_FORMATTED_LIMIT = 100000


def format_resource_list(rl, formats=None):
    """Canonical quantity strings for rl, sorted by name; formats maps names to a format, else default_format(name)."""
    formats = formats or {}
    result = {}
    for name in sorted(rl):
        key = (rl[name], formats.get(name) or default_format(name))
        text = _FORMATTED.get(key)
        if text is None:
            text = format_quantity(key[0], key[1])
            if len(_FORMATTED) < _FORMATTED_LIMIT:
                _FORMATTED[key] = text
        result[name] = text
    return result


def add(a, b):
    """a + b over the union of names."""
    result = dict(a)
    for name, value in b.items():
        result[name] = result.get(name, 0) + value
    return result


def subtract(a, b):
    """a - b over the union of names (names only in b come out negative)."""
    result = dict(a)
    for name, value in b.items():
        result[name] = result.get(name, 0) - value
    return result


def multiply(rl, factor):
    """Every quantity of rl times factor (int, Fraction or a decimal string such as '1.1')."""
    factor = Fraction(factor)
    return dict((name, value * factor) for name, value in rl.items())


def maximum(a, b):
    """The larger of a and b per name, over the union of names."""
    result = dict(a)
    for name, value in b.items():
        result[name] = max(result[name], value) if name in result else value
    return result


def minimum(a, b):
    """The smaller of a and b per name, over the names present in both."""
    return dict((name, min(a[name], b[name])) for name in a if name in b)


def less_or_equal(a, b):
    """(whether a fits under b, names that do not); like Kubernetes, only names present in both count."""
    names = sorted(name for name in b if name in a and a[name] > b[name])
    return not names, names


def mask(rl, names):
    """Only the named resources of rl."""
    names = set(names)
    return dict((name, value) for name, value in rl.items() if name in names)


def without(rl, names):
    """rl without the named resources."""
    names = set(names)
    return dict((name, value) for name, value in rl.items() if name not in names)


def resource_names(rl):
    """The names in rl, as a sorted list."""
    return sorted(rl)


def intersection(a_names, b_names):
    """Names in both collections, sorted."""
    b_set = set(b_names)
    return sorted(set(name for name in a_names if name in b_set))


def difference(a_names, b_names):
    """Names in a_names but not in b_names, sorted."""
    b_set = set(b_names)
    return sorted(set(name for name in a_names if name not in b_set))


def is_zero(rl):
    """True when every quantity is zero (an empty list is zero)."""
    return all(value == 0 for value in rl.values())


def remove_zeros(rl):
    """rl without its zero quantities."""
    return dict((name, value) for name, value in rl.items() if value != 0)


def is_negative(rl):
    """Sorted names whose quantity is below zero."""
    return sorted(name for name, value in rl.items() if value < 0)


def clamp_negative(rl):
    """rl with every negative quantity replaced by zero."""
    return dict((name, max(value, 0)) for name, value in rl.items())


def equals(a, b):
    """True when a and b have the same names and equal quantities (like Kubernetes, {cpu: 0} != {})."""
    return len(a) == len(b) and all(name in b and b[name] == value for name, value in a.items())


def total(lists):
    """The sum of an iterable of ResourceLists."""
    result = {}
    for rl in lists:
        result = add(result, rl)
    return result
