# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Errors of the kvquota core: every failure names the problem and the fix, on one line.

str(err) is "<problem>. Fix: <fix>" (or just "<problem>" when there is no fix).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type


def _one_line(text):
    """Collapse whitespace (newlines included) so the message stays on one line."""
    return " ".join(str(text).split())


class KvquotaError(Exception):
    """Base class: message says what is wrong, fix says what to do about it."""

    def __init__(self, message, fix=None, details=None):
        self.message = _one_line(message).rstrip(".")
        self.fix = _one_line(fix).rstrip(".") if fix else None
        self.details = dict(details) if details else {}
        super(KvquotaError, self).__init__(str(self))

    def __str__(self):
        if self.fix:
            return "%s. Fix: %s" % (self.message, self.fix)
        return self.message


class InputError(KvquotaError, ValueError):
    """The caller gave a value that cannot be used (malformed quantity, bad ratio, ...)."""


class NotFoundError(KvquotaError):
    """A named object (node, namespace, quota, VM) does not exist."""


class ForbiddenError(KvquotaError):
    """RBAC denied a request."""


class UnreachableError(KvquotaError):
    """The API server could not be reached or did not answer."""


class ConflictError(KvquotaError):
    """A conditional write lost against a concurrent writer too often."""


class LeaseHeldError(KvquotaError):
    """Another holder owns the coordination Lease for this scope."""


class WaitTimeoutError(KvquotaError):
    """A wait (migration, pod gone, usage fits) ran out of time."""
