# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Durations as operators write them in playbooks and AWX surveys: 3600, "90s", "15m", "2h", "1d", "1h30m"."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import re

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d+)([smhd])")


def parse_duration(value, name="duration"):
    """Whole seconds (> 0) of an int or a string such as '90s', '15m', '2h', '1d' or '1h30m'."""
    text = str(value).strip().lower() if value is not None and not isinstance(value, bool) else ""
    seconds = None
    if text.isdigit():
        seconds = int(text)
    elif text and _PART.sub("", text) == "":
        seconds = sum(int(n) * _UNITS[u] for n, u in _PART.findall(text))
    if seconds is None:
        raise InputError("malformed %s %r" % (name, value),
                         "give whole seconds or a duration such as 90s, 15m, 2h, 1d or 1h30m")
    if seconds <= 0:
        raise InputError("%s must be longer than zero, got %r" % (name, value),
                         "give a %s longer than the maintenance step, e.g. 2h" % name)
    return seconds
