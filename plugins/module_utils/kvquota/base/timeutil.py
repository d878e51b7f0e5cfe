# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Times as the API and the collection's records write them: RFC 3339 UTC text and Unix seconds. The one time
parser of the collection (ledgers, leases, window records, pods' and Events' timestamps)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import calendar
import datetime
import time

try:
    from dateutil.parser import isoparse
except ImportError:  # python-dateutil comes with kubernetes; reported when a time is parsed
    isoparse = None

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError, KvquotaError


def format_time(seconds):
    """RFC 3339 UTC text ('2025-01-31T12:00:00Z') for Unix seconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(seconds)))


def parse_datetime(text):
    """An aware datetime for RFC 3339 text (python-dateutil's isoparse: fractions of any length, Z or an offset;
    no zone means UTC), None for None. The collection's one time parser."""
    if text is None:
        return None
    if isinstance(text, datetime.datetime):
        parsed = text
    else:
        if isoparse is None:
            raise KvquotaError("the Python library 'python-dateutil' is required to read times",
                               "pip install python-dateutil (it comes with kubernetes)")
        try:
            parsed = isoparse(str(text).strip())
        except (ValueError, OverflowError):
            raise InputError("malformed time '%s'" % text, "use RFC 3339, e.g. 2025-01-31T12:00:00Z")
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.timezone.utc)


def parse_time(text):
    """Unix seconds (whole, fractions dropped) for RFC 3339 text (parse_datetime); numbers pass through."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return int(text)
    parsed = parse_datetime(text)
    if parsed is None:
        return None
    return calendar.timegm(parsed.utctimetuple())
