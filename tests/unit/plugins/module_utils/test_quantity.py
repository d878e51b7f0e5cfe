# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Quantity parsing and canonical printing, checked against the apiserver's documented behaviour.

Expected strings come from the behaviour of k8s.io/apimachinery pkg/api/resource
(its own test tables and the rules in quantity.go), not from running this code.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from fractions import Fraction

import pytest
from hypothesis import assume, given, settings, strategies as st

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError, KvquotaError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import (
    BINARY_SI,
    DECIMAL_EXPONENT,
    DECIMAL_SI,
    canonical,
    format_quantity,
    parse_grouped_number,
    parse_quantity,
    quantity_format,
    round_up,
    stored_string,
)

Ki, Mi, Gi, Ti, Pi, Ei = (1024 ** n for n in range(1, 7))
MAX = 2 ** 63 - 1


@pytest.mark.parametrize("text, value, fmt", [
    ("0", 0, DECIMAL_SI),
    ("0n", 0, DECIMAL_SI),
    ("0Ki", 0, BINARY_SI),
    ("0T", 0, DECIMAL_SI),
    ("1", 1, DECIMAL_SI),
    ("1Ki", Ki, BINARY_SI),
    ("7Mi", 7 * Mi, BINARY_SI),
    ("6Gi", 6 * Gi, BINARY_SI),
    ("5Ti", 5 * Ti, BINARY_SI),
    ("4Pi", 4 * Pi, BINARY_SI),
    ("3Ei", 3 * Ei, BINARY_SI),
    ("5n", Fraction(5, 10 ** 9), DECIMAL_SI),
    ("4u", Fraction(4, 10 ** 6), DECIMAL_SI),
    ("3m", Fraction(3, 1000), DECIMAL_SI),
    ("50k", 50000, DECIMAL_SI),
    ("7M", 7 * 10 ** 6, DECIMAL_SI),
    ("6G", 6 * 10 ** 9, DECIMAL_SI),
    ("40T", 40 * 10 ** 12, DECIMAL_SI),
    ("2P", 2 * 10 ** 15, DECIMAL_SI),
    ("1E", 10 ** 18, DECIMAL_SI),
    ("12E", 12 * 10 ** 18, DECIMAL_SI),  # decimal values are not capped
    ("1E-3", Fraction(1, 1000), DECIMAL_EXPONENT),
    ("1e3", 1000, DECIMAL_EXPONENT),
    ("1.3E+6", 1300000, DECIMAL_EXPONENT),
    ("1.53E12", 1530000000000, DECIMAL_EXPONENT),
    ("100.035k", 100035, DECIMAL_SI),
    ("0.0005k", Fraction(1, 2), DECIMAL_SI),
    ("0.5e-2", Fraction(5, 1000), DECIMAL_EXPONENT),
    ("6.987654321G", 6987654321, DECIMAL_SI),
    ("1.01E", 101 * 10 ** 16, DECIMAL_SI),
    # sub-nano precision rounds up (away from zero) to the next 1n
    ("3.001n", Fraction(4, 10 ** 9), DECIMAL_SI),
    ("1.1E-9", Fraction(2, 10 ** 9), DECIMAL_EXPONENT),
    ("0.0000000001", Fraction(1, 10 ** 9), DECIMAL_SI),
    ("0.9n", Fraction(1, 10 ** 9), DECIMAL_SI),
    ("0.00000012345", Fraction(124, 10 ** 9), DECIMAL_SI),
    ("-0.00000012345", Fraction(-124, 10 ** 9), DECIMAL_SI),
    ("1e-20", Fraction(1, 10 ** 9), DECIMAL_EXPONENT),
    # BinarySI is capped at 2^63-1
    ("9Ei", MAX, BINARY_SI),
    ("8Ei", MAX, BINARY_SI),
    ("-9Ei", -MAX, BINARY_SI),
    ("9223372036854775807Ki", MAX, BINARY_SI),
    # fractional binary values
    ("100.035Ki", Fraction(10243584, 100), BINARY_SI),
    ("0.5Mi", Mi // 2, BINARY_SI),
    ("0.025Ti", Fraction(274877906944, 10), BINARY_SI),
    ("0.000000000001Ki", Fraction(2, 10 ** 9), DECIMAL_SI),  # below 1: the format becomes DecimalSI
    (".001", Fraction(1, 1000), DECIMAL_SI),
    ("1.", 1, DECIMAL_SI),
    ("1.G", 10 ** 9, DECIMAL_SI),
    ("+1.5", Fraction(3, 2), DECIMAL_SI),
    ("-0", 0, DECIMAL_SI),
    ("007", 7, DECIMAL_SI),
    (" 2Gi\n", 2 * Gi, BINARY_SI),  # JSON decoding trims whitespace
    (3, 3, DECIMAL_SI),
    (-7, -7, DECIMAL_SI),
    (1.5, Fraction(3, 2), DECIMAL_SI),
    (0.1, Fraction(1, 10), DECIMAL_SI),
    (Fraction(1, 3), Fraction(333333334, 10 ** 9), DECIMAL_SI),
])
def test_parse(text, value, fmt):
    assert parse_quantity(text) == value
    assert isinstance(parse_quantity(text), Fraction)
    assert quantity_format(text) == fmt


@pytest.mark.parametrize("text", [
    "", " ", "+", "-", ".", "-.", "Gi", "m",
    "1.1.M", "1+1.0M", "0.1mi", "0.1am", "aoeu", ".5i", "1i", "-3.01i", "-3.01e-",
    "5GB", "5 G", "1ki", "1e", "1e+", "1Ee3", "1ke3", "--1", "1_000", "0x10", "1,000",
    "1e5000",
])
def test_parse_rejects(text):
    with pytest.raises(InputError) as info:
        parse_quantity(text, "limits.memory")
    message = str(info.value)
    assert "\n" not in message
    assert "for limits.memory" in message
    assert ". Fix: " in message


@pytest.mark.parametrize("value", [None, True, [], {}, float("nan"), float("inf")])
def test_parse_rejects_non_quantities(value):
    with pytest.raises(InputError):
        parse_quantity(value)


def test_error_message_names_value_and_fix():
    with pytest.raises(InputError) as info:
        parse_quantity("5GB", "limits.memory")
    assert str(info.value) == ("malformed quantity '5GB' for limits.memory. "
                               "Fix: use a Kubernetes quantity such as 5G or 5Gi")
    assert info.value.fix == "use a Kubernetes quantity such as 5G or 5Gi"
    assert isinstance(info.value, KvquotaError)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("value, fmt, expected", [
    (Gi, BINARY_SI, "1Gi"),
    (300 * Mi, BINARY_SI, "300Mi"),
    (6 * Ki, BINARY_SI, "6Ki"),
    (1001 * Gi, BINARY_SI, "1001Gi"),
    (Ti, BINARY_SI, "1Ti"),
    (5, BINARY_SI, "5"),
    (Fraction(1, 2), BINARY_SI, "500m"),
    (10 ** 9, DECIMAL_SI, "1G"),
    (Fraction(1, 1000), DECIMAL_SI, "1m"),
    (Fraction(80, 1000), DECIMAL_SI, "80m"),
    (Fraction(108, 100), DECIMAL_SI, "1080m"),
    (300 * 10 ** 6, DECIMAL_SI, "300M"),
    (10 ** 12, DECIMAL_SI, "1T"),
    (1234567 * 10 ** 6, DECIMAL_SI, "1234567M"),
    (Fraction(1234567, 1000), BINARY_SI, "1234567m"),
    (3000, DECIMAL_SI, "3k"),
    (1025, BINARY_SI, "1025"),
    (1023, BINARY_SI, "1023"),
    (-1023, BINARY_SI, "-1023"),
    (1024, BINARY_SI, "1Ki"),
    (-1024, BINARY_SI, "-1Ki"),
    (1536, BINARY_SI, "1536"),
    (Fraction(2049, 2), BINARY_SI, "1024500m"),  # not whole: DecimalSI
    (0, DECIMAL_SI, "0"),
    (0, BINARY_SI, "0"),
    (0, DECIMAL_EXPONENT, "0"),
    (10 ** 9, DECIMAL_EXPONENT, "1e9"),
    (Fraction(1, 1000), DECIMAL_EXPONENT, "1e-3"),
    (Fraction(1, 10 ** 9), DECIMAL_EXPONENT, "1e-9"),
    (Fraction(80, 1000), DECIMAL_EXPONENT, "80e-3"),
    (300 * 10 ** 6, DECIMAL_EXPONENT, "300e6"),
    (3000, DECIMAL_EXPONENT, "3e3"),
    (1500, DECIMAL_EXPONENT, "1500"),
    (Fraction(1, 10 ** 9), DECIMAL_SI, "1n"),
    (Fraction(1080, 10 ** 9), DECIMAL_SI, "1080n"),
    (Fraction(80, 10 ** 6), DECIMAL_SI, "80u"),
    (1500, DECIMAL_SI, "1500"),
    (1200, DECIMAL_SI, "1200"),
    (Fraction(3, 2), DECIMAL_SI, "1500m"),
    (-Fraction(3, 2), DECIMAL_SI, "-1500m"),
    (Fraction(1, 3), DECIMAL_SI, "333333334n"),  # rounded up to the next 1n
    (-Fraction(1, 3), DECIMAL_SI, "-333333334n"),  # away from zero
    (MAX, BINARY_SI, "9223372036854775807"),
    (Ei, BINARY_SI, "1Ei"),
    (7 * Ei, BINARY_SI, "7Ei"),
    (10 ** 18, DECIMAL_SI, "1E"),
    (999 * 10 ** 18, DECIMAL_SI, "999E"),
    (10 ** 21 + 1, DECIMAL_SI, "1000000000000000000001"),
    (10 ** 21, DECIMAL_EXPONENT, "1e21"),
    # the reference pod sizes (sizing.md section 4)
    (17440333824, BINARY_SI, "17031576Ki"),
    (3695599616, BINARY_SI, "3608984Ki"),
    (17570565824, BINARY_SI, "17570565824"),
    (50 * 10 ** 6, BINARY_SI, "50000000"),  # a whole BinarySI value prints as bare digits, never "50M"
    (50 * 10 ** 6, DECIMAL_SI, "50M"),
    (8940039936, BINARY_SI, "8940039936"),  # 8730507 x 1024 + 768: not whole Ki
    (Fraction(4015, 1000), DECIMAL_SI, "4015m"),
    (60 * Gi, BINARY_SI, "60Gi"),
])
def test_format(value, fmt, expected):
    assert format_quantity(value, fmt) == expected
    if value > 0:
        negated = format_quantity(-Fraction(value), fmt)
        assert negated == "-" + expected


@pytest.mark.parametrize("value, fmt", [(10 ** 21, DECIMAL_SI), (1024 ** 7, BINARY_SI)])
def test_format_refuses_values_the_apiserver_prints_wrongly(value, fmt):
    with pytest.raises(InputError):
        format_quantity(value, fmt)


def test_format_rejects_unknown_format():
    with pytest.raises(InputError):
        format_quantity(1, "Binary")


@pytest.mark.parametrize("text, expected", [
    ("1Ki", "1Ki"),
    ("1024Mi", "1Gi"),
    ("1000M", "1G"),
    (".001Ki", "1024m"),
    (".000001Ki", "1024u"),
    (".000000001Ki", "1024n"),
    (".000000000001Ki", "2n"),
    ("1.5", "1500m"),
    ("1.5Gi", "1536Mi"),
    ("0.5Ki", "512"),
    ("2000", "2k"),
    ("1.5e3", "1500"),
    ("1.2e3", "1200"),
    ("0.1m", "100u"),
    ("+1500", "1500"),
    ("007Ki", "7Ki"),
    ("8Ei", "9223372036854775807"),
    ("3608984Ki", "3608984Ki"),
    ("3695599616", "3695599616"),  # a decimal spelling stays decimal
])
def test_canonical(text, expected):
    assert canonical(text) == expected
    if parse_quantity(text) != 0:
        assert canonical("-" + text.lstrip("+")) == "-" + expected


@pytest.mark.parametrize("text, expected", [
    ("1Gi", "1Gi"),
    ("1024Mi", "1Gi"),
    ("1000m", "1"),
    ("+1500", "+1500"),  # the fast parser keeps spellings it deems canonical
    ("007Ki", "007Ki"),
    ("1.500", "1.500"),
    ("0.5", "500m"),
    ("1.5Gi", "1536Mi"),
    ("0", "0"),
    ("-0", "0"),
    ("1e3", "1e3"),
    ("15e2", "1500"),
    ("8Ki", "8Ki"),
    ("16Ki", "16Ki"),
    ("9Ki", "9Ki"),
    ("1024Ki", "1Mi"),
    ("8Ei", "9223372036854775807"),
])
def test_stored_string(text, expected):
    assert stored_string(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("8,940,039,936", 8940039936),
    ("62,820,279,552", 62820279552),
    ("999", 999),
    ("1234", 1234),
    ("-1,000", -1000),
    (42, 42),
])
def test_parse_grouped_number(text, expected):
    assert parse_grouped_number(text) == expected


@pytest.mark.parametrize("text", ["8,94,039", "1,0000", ",100", "1.5", "", "abc", True])
def test_parse_grouped_number_rejects(text):
    with pytest.raises(InputError):
        parse_grouped_number(text, "limits.memory")


def test_round_up():
    assert round_up(Fraction(1, 3)) == Fraction(333333334, 10 ** 9)
    assert round_up(Fraction(-1, 3)) == Fraction(-333333334, 10 ** 9)
    assert round_up(Fraction(1001, 1000), 1) == 2
    assert round_up(5, 1) == 5


# ---------------------------------------------------------------- properties

_nanos = st.integers(min_value=-(10 ** 20), max_value=10 ** 20)
_formats = st.sampled_from([BINARY_SI, DECIMAL_SI, DECIMAL_EXPONENT])


@st.composite
def representable(draw):
    """A value Kubernetes can hold: a whole number of nano units below 1000E (or 8Ei for BinarySI)."""
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return Fraction(draw(_nanos), 10 ** 9)
    if kind == 1:
        return Fraction(draw(st.integers(-(2 ** 40), 2 ** 40)) * 1024 ** draw(st.integers(0, 2)))
    if kind == 2:
        return Fraction(draw(st.integers(-999, 999))) * Fraction(10) ** draw(st.integers(-9, 18))
    return Fraction(draw(st.integers(-(10 ** 6), 10 ** 6)), 10 ** draw(st.integers(0, 9)))


@settings(max_examples=200, deadline=None)
@given(representable(), _formats)
def test_parse_inverts_format(value, fmt):
    assume(fmt != BINARY_SI or abs(value) <= MAX)  # BinarySI input is capped at 2^63-1
    text = format_quantity(value, fmt)
    assert parse_quantity(text) == value


def _bare_binary(text, fmt):
    """A BinarySI value printed as bare digits: re-parsing it infers DecimalSI (the apiserver does the same)."""
    return fmt == BINARY_SI and text.lstrip("-").isdigit()


@settings(max_examples=200, deadline=None)
@given(representable(), _formats)
def test_canonical_is_idempotent(value, fmt):
    assume(fmt != BINARY_SI or abs(value) <= MAX)  # BinarySI input is capped at 2^63-1
    text = format_quantity(value, fmt)
    once = canonical(text)
    assert parse_quantity(once) == value
    assert canonical(once) == once
    if not _bare_binary(text, fmt):
        assert once == text


def test_bare_binary_digits_change_format_on_reparse():
    # 125000 in BinarySI prints as "125000"; the apiserver re-reads that as DecimalSI "125k".
    assert format_quantity(125000, BINARY_SI) == "125000"
    assert canonical("122.0703125Ki") == "125000"
    assert canonical("125000") == "125k"


@settings(max_examples=200, deadline=None)
@given(representable(), _formats)
def test_format_keeps_its_format(value, fmt):
    assume(fmt != BINARY_SI or abs(value) <= MAX)  # BinarySI input is capped at 2^63-1
    text = format_quantity(value, fmt)
    if value == 0:
        assert text == "0"
    elif fmt == BINARY_SI and (abs(value) < 1024 or value.denominator != 1 or text.lstrip("-").isdigit()):
        assert quantity_format(text) in (DECIMAL_SI, DECIMAL_EXPONENT)
    elif fmt == DECIMAL_EXPONENT and "e" not in text:
        assert quantity_format(text) == DECIMAL_SI
    else:
        assert quantity_format(text) == fmt


@settings(max_examples=200, deadline=None)
@given(st.integers(-(10 ** 15), 10 ** 15), st.integers(0, 12),
       st.sampled_from(["", "n", "u", "m", "k", "M", "G", "T", "Ki", "Mi", "Gi", "e3", "e-3", "E2"]))
def test_parse_matches_exact_arithmetic(digits, decimals, suffix):
    sign = "-" if digits < 0 else ""
    body = str(abs(digits)).rjust(decimals + 1, "0")
    text = sign + (body[:-decimals] + "." + body[-decimals:] if decimals else body) + suffix
    multiplier = {"": 1, "n": Fraction(1, 10 ** 9), "u": Fraction(1, 10 ** 6), "m": Fraction(1, 1000),
                  "k": 1000, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12, "Ki": Ki, "Mi": Mi, "Gi": Gi,
                  "e3": 1000, "e-3": Fraction(1, 1000), "E2": 100}[suffix]
    exact = Fraction(digits, 10 ** decimals) * multiplier
    value = parse_quantity(text)
    if suffix.endswith("i") and abs(exact) > MAX:
        assert value == (MAX if exact > 0 else -MAX)  # BinarySI is capped at 2^63-1
        return
    assert value == round_up(exact)
    assert abs(value - exact) < Fraction(1, 10 ** 9)
    assert (value * 10 ** 9).denominator == 1
