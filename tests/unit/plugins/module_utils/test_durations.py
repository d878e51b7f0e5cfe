import pytest
from hypothesis import given, strategies as st

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.durations import parse_duration
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError


@pytest.mark.parametrize("text,seconds", [
    (3600, 3600), ("90", 90), ("90s", 90), ("15m", 900), ("2h", 7200), ("1d", 86400), ("1h30m", 5400),
    (" 2H ", 7200),
])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", [0, "0", "0s", "", None, True, "-5", "2 hours", "1.5h", "h", "5w"])
def test_parse_duration_rejects(text):
    with pytest.raises(InputError) as err:
        parse_duration(text, "ttl")
    assert "ttl" in str(err.value) and "Fix:" in str(err.value)


@given(st.integers(min_value=0, max_value=10), st.integers(min_value=0, max_value=23),
       st.integers(min_value=0, max_value=59), st.integers(min_value=0, max_value=59))
def test_parts_add_up(d, h, m, s):
    text = "".join("%d%s" % (n, u) for n, u in ((d, "d"), (h, "h"), (m, "m"), (s, "s")) if n)
    total = d * 86400 + h * 3600 + m * 60 + s
    if total == 0:
        return
    assert parse_duration(text) == total
