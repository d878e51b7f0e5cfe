# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""outage.is_api_outage on the results kubernetes.core 5.x leaves when the API server blips, and on answers.

The failed results are shaped as kubernetes.core's modules produce them (the texts of k8s_info's
"Exception ... raised while trying to get resource", k8s_drain's "Failed to retrieve node ... due to" with its
status, the MODULE FAILURE of a discovery that met a closed port, as seen against 127.0.0.1:9)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import pytest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.client.outage import is_api_outage
from ansible_collections.kvquota.maintenance.plugins.test.api_outage import TestModule as ApiOutageTests
from ansible_collections.kvquota.maintenance.plugins.test.api_outage import api_outage, error_event_texts

REFUSED_TRACEBACK = (
    "Traceback (most recent call last):\n  File \"/usr/lib/python3/site-packages/urllib3/connection.py\", line 239, "
    "in _new_conn\nConnectionRefusedError: [Errno 111] Connection refused\n\nThe above exception was the direct cause"
    " of the following exception:\n...\nurllib3.exceptions.MaxRetryError: HTTPSConnectionPool(host='127.0.0.1', "
    "port=6443): Max retries exceeded with url: /version (Caused by NewConnectionError(\"HTTPSConnection(host="
    "'127.0.0.1', port=6443): Failed to establish a new connection: [Errno 111] Connection refused\"))\n")


def dynamic_error(status, reason):
    """A k8s_info failure wrapping a kubernetes.dynamic ApiError (its __str__: "<status>\\nReason: <reason>...")."""
    return {"failed": True, "msg": "Exception '%d\nReason: %s\nHTTP response headers: HTTPHeaderDict({})\nHTTP "
                                   "response body: {}' raised while trying to get resource using (name=None, "
                                   "namespace=None, label_selectors=[], field_selectors=[])" % (status, reason)}


TRANSIENT = {
    "discovery meets a closed port (module crash)": {
        "failed": True, "msg": "MODULE FAILURE: No start of json char found\nSee stdout/stderr for the exact error",
        "module_stderr": REFUSED_TRACEBACK, "module_stdout": "", "rc": 1},
    "k8s_drain read_node refused": {
        "failed": True, "msg": "Failed to retrieve node 'node-1' due to: HTTPSConnectionPool(host='127.0.0.1', "
                               "port=6443): Max retries exceeded with url: /api/v1/nodes/node-1 (Caused by "
                               "NewConnectionError('Failed to establish a new connection: [Errno 111] Connection "
                               "refused'))"},
    "k8s_drain read_node 503 with status": {
        "failed": True, "msg": "Failed to retrieve node 'node-1' due to: Service Unavailable", "status": 503},
    "k8s_drain patch_node 500": {
        "failed": True, "msg": "Failed to patch node due to: (500)\nReason: Internal Server Error\nHTTP response "
                               "body: etcdserver: leader changed"},
    "k8s_info 503": dynamic_error(503, "Service Unavailable"),
    "k8s_info 504": dynamic_error(504, "Gateway Timeout"),
    "k8s_info 429 of API Priority and Fairness": dynamic_error(429, "Too Many Requests"),
    "read timeout of a frozen API server": {
        "failed": True, "msg": "Exception 'HTTPSConnectionPool(host='127.0.0.1', port=6443): Read timed out. (read "
                               "timeout=None)' raised while trying to get resource"},
    "connection reset": {
        "failed": True, "msg": "Exception '('Connection aborted.', ConnectionResetError(104, 'Connection reset by "
                               "peer'))' raised while trying to get resource"},
    "k8s_drain pod wait meets a 429 (reason only)": {"failed": True, "msg": "Exception raised: Too Many Requests"},
    "k8s_info of a kind discovery does not list yet": {
        "changed": False, "resources": [], "api_found": False,
        "msg": "Failed to find API for resource with apiVersion \"kubevirt.io/v1\" and kind "
               "\"VirtualMachineInstance\""},
}

ANSWERS = {
    "a success": {"changed": False, "resources": [{"kind": "Node"}], "api_found": True},
    "a changed uncordon": {"changed": True, "result": "node node-1 marked schedulable."},
    "a success without api_found (k8s_drain)": {"changed": False, "result": "node node-1 already schedulable."},
    "k8s_drain 403 with status": {
        "failed": True, "msg": "Failed to retrieve node 'node-1' due to: Forbidden", "status": 403},
    "k8s_drain node not found": {"failed": True, "msg": "Node node-9 not found."},
    "k8s_info 403": dynamic_error(403, "Forbidden"),
    "k8s_info 404": dynamic_error(404, "Not Found"),
    "k8s 422": {"failed": True, "msg": "Failed to create object: (422)\nReason: Unprocessable Entity\nHTTP response "
                                       "body: spec.vmiName: Required value", "status": 422},
    "an eviction refused by a PodDisruptionBudget": {
        "failed": True, "msg": "Failed to delete pod ns/p due to: (429)\nReason: Too Many Requests\nHTTP response "
                               "body: Cannot evict pod as it would violate the pod's disruption budget."},
    "a TLS verification failure": {
        "failed": True, "msg": "Exception 'HTTPSConnectionPool(host='api', port=6443): Max retries exceeded with url:"
                               " /version (Caused by SSLError(SSLCertVerificationError(1, '[SSL: "
                               "CERTIFICATE_VERIFY_FAILED] certificate verify failed')))' raised"},
    "a TLS host name mismatch (urllib3's match_hostname)": {
        "failed": True, "msg": "Exception 'HTTPSConnectionPool(host='10.0.0.9', port=6443): Max retries exceeded with "
                               "url: /version (Caused by SSLError(CertificateError(\"hostname '10.0.0.9' doesn't "
                               "match 'api.example'\")))' raised"},
    "an unknown host": {
        "failed": True, "msg": "Exception 'HTTPSConnectionPool(host='nope', port=6443): Max retries exceeded (Caused "
                               "by NewConnectionError('Failed to resolve 'nope' ([Errno -2] Name or service not "
                               "known)'))' raised"},
    "a failed task without any text": {"failed": True},
    "not a dict": "Connection refused",
}


@pytest.mark.parametrize("name", sorted(TRANSIENT))
def test_a_blip_is_an_outage(name):
    assert is_api_outage(TRANSIENT[name]) is True


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_an_answer_or_a_success_is_not(name):
    assert is_api_outage(ANSWERS[name]) is False


def test_the_status_field_wins_over_the_text():
    # a 403 whose body quotes a refused connection of someone else is still a 403
    assert not is_api_outage({"failed": True, "status": 403, "msg": "denied: Connection refused upstream"})
    assert is_api_outage({"failed": True, "status": "503", "msg": "Failed to retrieve node 'n' due to: x"})


def test_the_jinja_test_is_registered_under_its_name():
    assert ApiOutageTests().tests()["api_outage"](TRANSIENT["k8s_info 503"]) is True
    assert ApiOutageTests().tests()["api_outage"](ANSWERS["k8s_info 403"]) is False


class Event(object):
    def __init__(self, msg, cause=None):
        self.msg = msg
        self.formatted_traceback = None
        self.chain = Chain(cause) if cause else None


class Chain(object):
    def __init__(self, event):
        self.event = event


class Stored(object):
    """What ansible-core 2.19+'s lazy container stores for result['exception']: the ErrorSummary in .value."""

    def __init__(self, event):
        self.value = Summary(event)


class Summary(object):
    def __init__(self, event):
        self.event = event


class LazyView(dict):
    """A result as the template view shows it while `until` runs: exception rendered, no msg, no module_stderr."""

    def __getitem__(self, key):
        value = dict.__getitem__(self, key)
        return "(traceback unavailable)" if key == "exception" else value

    def get(self, key, default=None):
        return self[key] if key in self else default


def crashed_module(cause_msg):
    return LazyView(changed=False, failed=True, attempts=1, exception=Stored(Event(
        "Module failed: No start of json char found", Event("MaxRetryError: Max retries exceeded with url: /version",
                                                            Event(cause_msg)))))


def test_a_crash_kept_as_an_error_event_is_read_below_the_view():
    refused = crashed_module("[Errno 111] Connection refused")
    assert "Connection refused" in "\n".join(error_event_texts(refused))
    assert api_outage(refused) is True
    assert api_outage(crashed_module("401\nReason: Unauthorized")) is False


def test_without_an_error_event_there_is_nothing_more_to_read():
    assert error_event_texts({"failed": True, "exception": "Traceback ..."}) == ()
    assert error_event_texts(["not", "a", "dict"]) == ()
    assert api_outage(LazyView(failed=True, exception="(traceback unavailable)")) is False


def test_a_startup_answer_on_a_retry_counts_only_for_a_task_that_retries_nothing_but_outages():
    forbidden = dict(ANSWERS["k8s_drain 403 with status"], attempts=2)
    assert is_api_outage(forbidden, recovering=True) is True
    assert is_api_outage(forbidden) is False                                  # a poll: its retries follow answers
    assert is_api_outage(dict(forbidden, attempts=1), recovering=True) is False   # a first attempt: an answer
    assert is_api_outage(dict(dynamic_error(404, "Not Found"), attempts=3), recovering=True) is True
    assert is_api_outage(dict(ANSWERS["k8s 422"], attempts=2), recovering=True) is False
    assert api_outage(forbidden, recovering=True) is True
    assert api_outage(forbidden) is False
