# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes quantities held exactly (fractions.Fraction), printed as the apiserver prints them.

Behaviour follows k8s.io/apimachinery pkg/api/resource (quantity.go, suffix.go,
amount.go, math.go):

- grammar: optional sign, digits with an optional decimal point, then a suffix
  (n u m "" k M G T P E, Ki Mi Gi Ti Pi Ei, or e/E followed by a signed integer);
- a non-zero value finer than 1n is rounded UP (away from zero) to the next 1n;
- a BinarySI value above 2^63-1 in magnitude is capped there (decimal ones are not);
- a BinarySI value strictly between -1 and 1 (other than 0) is parsed as DecimalSI;
- canonical printing: zero is "0"; DecimalSI/DecimalExponent use the largest
  exponent that is a multiple of 3 and loses no precision; BinarySI uses the largest
  power of 1024, but falls back to DecimalSI for values in (-1024, 1024) or with a
  fractional part.

Two deliberate differences, both about input the apiserver mishandles:
- a string with no digit at all ("", "+", ".", "Gi") is rejected; the apiserver
  reads most of those as 0;
- a value whose canonical suffix does not exist (DecimalSI exponent above 18, i.e.
  1000E and beyond with trailing zeros, or BinarySI beyond Ei) raises InputError
  instead of being printed without its suffix (the apiserver would print 1000E as "1").
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import math
import re
from fractions import Fraction

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError

BINARY_SI = "BinarySI"
DECIMAL_SI = "DecimalSI"
DECIMAL_EXPONENT = "DecimalExponent"
FORMATS = (BINARY_SI, DECIMAL_SI, DECIMAL_EXPONENT)

NANO = Fraction(1, 10 ** 9)
MAX_INT64 = 2 ** 63 - 1

_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_BY_EXPONENT = dict((v, k) for k, v in _DECIMAL_SUFFIXES.items())
_BINARY_BY_POWER = dict((v // 10, k) for k, v in _BINARY_SUFFIXES.items())

# The apiserver's scanner: sign, digits, '.', digits, then [eEinumkKMGTP]* [+-]? [0-9]*.
_SCAN = re.compile(r"^([+-]?)0*([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[+-]?[0-9]*)$")
# Exponents beyond this are not expanded (10**n would be huge); see _exponent_value.
_EXPONENT_LIMIT = 4096
_GROUPED = re.compile(r"^([+-]?)([0-9]{1,3}(?:,[0-9]{3})*|[0-9]+)$")

_EXAMPLES = "500m, 2, 512Mi or 4G"


def _where(name):
    """' for <name>' when a resource name is known, else ''."""
    return " for %s" % name if name else ""


def _fix_for(text):
    """A fix that suggests the intended spelling when the unit looks like a familiar one."""
    match = re.match(r"^\s*([+-]?[0-9]*\.?[0-9]*)\s*([A-Za-z]{1,3})\s*$", text)
    if match and re.search(r"[0-9]", match.group(1)):
        number, unit = match.group(1), match.group(2).lower()
        if unit[0] in "kmgtpe" and unit[1:] in ("", "b", "i", "ib"):
            decimal = "k" if unit[0] == "k" else unit[0].upper()
            return "use a Kubernetes quantity such as %s%s or %s%si" % (number, decimal, number, unit[0].upper())
    return "use a Kubernetes quantity such as %s" % _EXAMPLES


def _malformed(text, name, why=None):
    """The InputError for a string the apiserver would not accept."""
    shown = text if len(text) <= 64 else text[:61] + "..."
    problem = "malformed quantity '%s'%s" % (shown, _where(name))
    if why:
        problem += " (%s)" % why
    return InputError(problem, _fix_for(text))


def round_up(value, step=NANO):
    """Round a Fraction away from zero to a whole multiple of step (default 1n), as the apiserver does."""
    value = Fraction(value)
    step = Fraction(step)
    units = value / step
    if units.denominator == 1:
        return value
    whole = -((-abs(units.numerator)) // units.denominator)
    return (whole if value > 0 else -whole) * step


def ceil_to(value, step):
    """The smallest whole multiple of step that is >= value (towards +infinity, unlike round_up)."""
    units = Fraction(value) / step
    whole = -((-units.numerator) // units.denominator)
    return whole * step


def _split(text, name):
    """(negative, integer digits, fraction digits, suffix) of a quantity string, or InputError."""
    match = _SCAN.match(text)
    if not match:
        raise _malformed(text, name)
    sign, num, denom, suffix = match.groups()
    _interpret(suffix, text, name)
    denom = denom or ""
    if not num and not denom and not re.match(r"^[+-]?0", text):
        raise _malformed(text, name, "no digits")
    return sign == "-", num, denom, suffix


def _interpret(suffix, text, name):
    """(base, exponent, format) of a suffix, exactly as the apiserver's suffixer reads it."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], DECIMAL_SI
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE" and re.match(r"^[+-]?[0-9]+$", suffix[1:]):
        exponent = int(suffix[1:])
        if not -2 ** 63 <= exponent < 2 ** 63:
            raise _malformed(text, name, "exponent out of range")
        exponent = (exponent + 2 ** 31) % 2 ** 32 - 2 ** 31  # Go's int32() conversion
        return 10, exponent, DECIMAL_EXPONENT
    raise _malformed(text, name, "unknown suffix '%s'" % suffix)


def _exponent_value(digits, exponent, text, name):
    """digits x 10**exponent, without building absurd powers of ten."""
    mantissa = int(digits) if digits else 0
    if mantissa == 0:
        return Fraction(0)
    if exponent > _EXPONENT_LIMIT:
        raise _malformed(text, name, "value too large")
    if exponent < -_EXPONENT_LIMIT and len(digits) + exponent < -9:
        return NANO  # far below 1n: the apiserver rounds it up to 1n
    return Fraction(mantissa) * Fraction(10) ** exponent


def _parse(text, name):
    """(value, format) of a quantity string."""
    if not isinstance(text, str):
        raise _malformed(repr(text), name)
    text = text.strip()
    if text == "0":
        return Fraction(0), DECIMAL_SI
    negative, num, denom, suffix = _split(text, name)
    base, exponent, fmt = _interpret(suffix, text, name)
    if base == 10:
        value = _exponent_value(num + denom, exponent - len(denom), text, name)
    else:
        value = Fraction(int(num + denom or "0"), 10 ** len(denom)) * (2 ** exponent)
    value = round_up(value)
    if fmt == BINARY_SI and value > MAX_INT64:
        value = Fraction(MAX_INT64)
    if fmt == BINARY_SI and 0 < value < 1:
        fmt = DECIMAL_SI
    return (-value if negative else value), fmt


def _coerce(value, name):
    """A quantity string from str/int/float input (JSON numbers are quantities too)."""
    if isinstance(value, bool) or value is None:
        raise _malformed(repr(value), name)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise _malformed(repr(value), name)
        return repr(value)
    if isinstance(value, str):
        return value
    raise _malformed(repr(value), name)


def parse_quantity_format(value, name=None):
    """(Fraction, format) of a quantity given as str, int, float or Fraction."""
    if isinstance(value, Fraction):
        return round_up(value), DECIMAL_SI
    return _parse(_coerce(value, name), name)


def parse_quantity(value, name=None):
    """The exact value of a Kubernetes quantity (str such as '1536Mi', int, float or Fraction)."""
    return parse_quantity_format(value, name)[0]


def quantity_format(text):
    """'BinarySI', 'DecimalSI' or 'DecimalExponent', as the apiserver infers it from text."""
    return parse_quantity_format(text)[1]


def _remove_factors(value, base):
    """(value / base**n, n) for the largest n with value divisible by base**n."""
    times = 0
    while value != 0 and value % base == 0:
        value //= base
        times += 1
    return value, times


def format_quantity(value, fmt=DECIMAL_SI):
    """The apiserver's canonical string for value (Fraction/int/str) in format fmt."""
    if fmt not in FORMATS:
        raise InputError("unknown quantity format '%s'" % (fmt,), "use one of %s" % ", ".join(FORMATS))
    if isinstance(value, str):
        value = parse_quantity(value)
    value = round_up(Fraction(value))
    if value == 0:
        return "0"
    if fmt == BINARY_SI and (-1024 < value < 1024 or value.denominator != 1):
        fmt = DECIMAL_SI
    if fmt == BINARY_SI:
        number = int(value)
        sign = "-" if number < 0 else ""
        mantissa, power = _remove_factors(abs(number), 1024)
        if power == 0:
            return "%s%d" % (sign, mantissa)
        if power not in _BINARY_BY_POWER:
            raise InputError("quantity %s is too large to print in BinarySI" % number,
                             "keep values below 8Ei")
        return "%s%d%s" % (sign, mantissa, _BINARY_BY_POWER[power])
    nanos = int(value / NANO)
    sign = "-" if nanos < 0 else ""
    mantissa, times = _remove_factors(abs(nanos), 10)
    exponent = times - 9
    shift = exponent % 3  # Python's % is non-negative: floor to a multiple of 3
    mantissa *= 10 ** shift
    exponent -= shift
    if fmt == DECIMAL_EXPONENT:
        return "%s%d%s" % (sign, mantissa, ("e%d" % exponent) if exponent else "")
    if exponent not in _DECIMAL_BY_EXPONENT:
        raise InputError("quantity %s%de%d is too large to print in DecimalSI" % (sign, mantissa, exponent),
                         "keep values below 1000E")
    return "%s%d%s" % (sign, mantissa, _DECIMAL_BY_EXPONENT[exponent])


def canonical(text, name=None):
    """format_quantity(parse_quantity(text), quantity_format(text)): the canonical spelling."""
    value, fmt = parse_quantity_format(text, name)
    return format_quantity(value, fmt)


def stored_string(text, name=None):
    """The string the apiserver stores and echoes back for text.

    Usually canonical(text); but the apiserver keeps the caller's own spelling when its
    fast parser deems it canonical already (e.g. '+1500', '007Ki', '1.500').
    """
    text = _coerce(text, name).strip()
    value, fmt = _parse(text, name)
    if text == "0":
        return text
    negative, num, denom, suffix = _split(text, name)
    base, exponent, _fmt = _interpret(suffix, text, name)
    digits = (num or "0") + denom
    if _fmt == BINARY_SI:
        if denom:
            return format_quantity(value, fmt)
        precision = 15 - len(num or "0") - (exponent * 3 // 10) - 1
        scale = 0
    else:
        precision = 18 - (len(num or "0") + len(denom))
        scale = exponent - len(denom)
    if precision < 0 or scale < -9:
        return format_quantity(value, fmt)
    number = int(digits)
    if _fmt == BINARY_SI:
        if number * 2 ** exponent > MAX_INT64:
            return format_quantity(value, fmt)
        if number & 7 != 0:
            return text
    elif scale % 3 == 0 and not digits.endswith("000") and digits[0] != "0":
        return text
    return format_quantity(value, fmt)


def parse_grouped_number(text, name=None):
    """An integer printed with thousands separators: '8,940,039,936' -> 8940039936."""
    if isinstance(text, bool):
        raise InputError("malformed number %r%s" % (text, _where(name)), "give digits such as 8,940,039,936")
    if isinstance(text, int):
        return text
    match = _GROUPED.match(str(text).strip())
    if not match:
        raise InputError("malformed number '%s'%s" % (text, _where(name)),
                         "give digits, optionally grouped by commas in threes, such as 8,940,039,936")
    number = int(match.group(2).replace(",", ""))
    return -number if match.group(1) == "-" else number
