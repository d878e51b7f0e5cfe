# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The api_outage test: a registered result of a kubernetes.core task failed on a control-plane blip.

Documentation lives in api_outage.yml next to this file; the rules are module_utils/kvquota/client/outage.py's.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.client.outage import is_api_outage


# how deep to follow an error event's chain of causes
_MAX_CAUSES = 10


def error_event_texts(result):
    """The messages and tracebacks of the error event ansible-core 2.19+ keeps in result['exception'].

    While `until` is evaluated, a module that crashed (kubernetes' discovery meeting a refused connection raises
    past kubernetes.core's error handling) has neither msg nor module_stderr yet: the controller holds the error as
    an ErrorSummary, which the template view shows as "(traceback unavailable)". Read below the view (the lazy
    container's stored value); () on ansible-core 2.18 and older, where msg and module_stderr carry the text."""
    try:
        raw = dict.get(result, "exception")
    except TypeError:
        return ()
    raw = getattr(raw, "value", raw)
    event = getattr(raw, "event", None)
    texts = []
    while event is not None and len(texts) < _MAX_CAUSES:
        texts.append("%s\n%s" % (getattr(event, "msg", "") or "", getattr(event, "formatted_traceback", "") or ""))
        event = getattr(getattr(event, "chain", None), "event", None)
    return tuple(texts)


def api_outage(result, recovering=False):
    """True when the task failed for a transient reason (connection refused/reset, timeout, 429, 5xx) or read a
    kind the API server does not serve yet; false for a success and for an answer (403, 404, 422, ...).
    recovering=true (a task that retries nothing but outages): a 401/403/404 on a retry counts too."""
    return is_api_outage(result, error_event_texts(result), recovering=bool(recovering))


class TestModule(object):
    """Jinja2 tests of kvquota.maintenance."""

    def tests(self):
        return {"api_outage": api_outage}
