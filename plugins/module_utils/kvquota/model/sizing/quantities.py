# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Quantities with their Kubernetes formats (Qty), a container's requests and limits (ContainerResources), and
Go's float parsing and %g formatting, as KubeVirt's renderresources computes and prints them.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import decimal
import math
import re
from collections import namedtuple
from dataclasses import dataclass, field

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import (
    format_quantity,
    parse_quantity_format,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.resources import default_format


Mi = 1024 ** 2


_DECIMAL_FLOAT = re.compile(r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$")
# strconv.ParseFloat's other spellings: hexadecimal mantissa with a binary exponent (which Go requires), and the
# special values (any case, optional sign)
_HEX_FLOAT = re.compile(r"^[+-]?0[xX]([0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+$")
_SPECIAL_FLOAT = re.compile(r"^[+-]?(inf|infinity|nan)$", re.IGNORECASE)
INT64_LIMIT = 2 ** 63


@dataclass(frozen=True)
class ContainerResources:
    """One container's requests and limits (ResourceLists of Fractions) as they appear on the pod."""

    name: str
    requests: dict
    limits: dict
    restartable: bool = False  # a native sidecar (init container with restartPolicy Always)
    formats: dict = field(default_factory=dict, compare=False)  # "requests.<name>"/"limits.<name>" -> format

    def _formats(self, which):
        """name -> format for requests or limits."""
        prefix = which + "."
        return dict((k[len(prefix):], f) for k, f in self.formats.items() if k.startswith(prefix))

    def formatted(self):
        """{"name", "requests", "limits"} with apiserver-canonical quantity strings."""
        return {
            "name": self.name,
            "requests": format_qty_list(self.requests, self._formats("requests")),
            "limits": format_qty_list(self.limits, self._formats("limits")),
        }


# ---------------------------------------------------------------- Kubernetes quantity arithmetic

Qty = namedtuple("Qty", "value fmt")


def qty(text, name=None):
    """A Qty from a quantity string (or number)."""
    value, fmt = parse_quantity_format(text, name)
    return Qty(value, fmt)


def qty_add(a, b):
    """Quantity.Add: keeps a's format unless a is zero."""
    if a is None:
        return b
    if b is None:
        return a
    return Qty(a.value + b.value, b.fmt if a.value == 0 else a.fmt)


def qty_sub(a, b):
    """Quantity.Sub: keeps a's format unless a is zero."""
    return Qty(a.value - b.value, b.fmt if a.value == 0 else a.fmt)


def ceil_qty(value):
    """Quantity.Value()/ScaledValue(): rounds up to a whole number."""
    return int(math.ceil(value)) if value >= 0 else -int(math.ceil(-value))


def format_qty_list(rl, formats):
    """Canonical strings for a ResourceList, in name order."""
    return dict((name, format_quantity(rl[name], formats.get(name) or default_format(name))) for name in sorted(rl))


def go_parse_float(text):
    """strconv.ParseFloat for decimal spellings; None when Go would reject it (or it is Inf/NaN)."""
    if text is None:
        return None
    text = str(text)
    if not _DECIMAL_FLOAT.match(text):
        return None
    return float(text)


def go_format_g(value):
    """fmt.Sprintf("%g", value) for a finite float64: shortest digits; %e when the exponent is below -4 or at least 6."""
    if value == 0:
        return "0"
    digits, exponent = _shortest_digits(value)
    sign = "-" if value < 0 else ""
    if exponent < -4 or exponent >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return "%s%se%s%02d" % (sign, mantissa, "-" if exponent < 0 else "+", abs(exponent))
    point = exponent + 1
    if point <= 0:
        return sign + "0." + "0" * (-point) + digits
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return sign + digits[:point] + "." + digits[point:]


def _shortest_digits(value):
    """(significant digits, decimal exponent of the first digit) of the shortest round-trip spelling."""
    sign, digits, exponent = decimal.Decimal(repr(abs(float(value)))).normalize().as_tuple()
    text = "".join(str(d) for d in digits)
    return text, len(text) + exponent - 1


def go_parse_float_any(text):
    """strconv.ParseFloat(text, 64) as (value, ok): decimal and hexadecimal spellings (a hexadecimal mantissa needs
    its p exponent), Inf, Infinity and NaN in any case; ok False where Go returns an error (a malformed text, or a
    finite spelling out of float64's range: ErrRange)."""
    if text is None:
        return None, False
    text = str(text)
    if _SPECIAL_FLOAT.match(text):
        value = float(text.lstrip("+-").lower().replace("infinity", "inf"))
        return (-value if text.startswith("-") else value), True
    if _DECIMAL_FLOAT.match(text):
        value = float(text)
    elif _HEX_FLOAT.match(text):
        value = float.fromhex(text)
    else:
        return None, False
    if math.isinf(value):
        return value, False   # ErrRange
    return value, True
