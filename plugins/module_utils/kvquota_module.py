# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible glue shared by every kvquota module: the connection (kubernetes.core's), the options and error shaping.

The core (module_utils/kvquota) has no Ansible imports: it gets a ready cluster.Cluster from connect() here,
and this file is the one place where its errors become fail_json results.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import atexit
import copy
import os
import shutil
import tempfile
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

try:
    import kubernetes
    HAS_KUBERNETES = True
    KUBERNETES_IMPORT_ERROR = None
except ImportError:
    HAS_KUBERNETES = False
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()

from ansible_collections.kubernetes.core.plugins.module_utils.args_common import (
    AUTH_ARG_SPEC as K8S_AUTH_ARG_SPEC,
)
from ansible_collections.kubernetes.core.plugins.module_utils.k8s import client as k8s_client
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.exceptions import CoreException

try:  # kubernetes.core >= 6.3
    from ansible_collections.kubernetes.core.plugins.module_utils.args_common import (
        extract_sensitive_values_from_kubeconfig,
    )
except ImportError:
    extract_sensitive_values_from_kubeconfig = None

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.client import cluster as cluster_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import (
    InputError,
    KvquotaError,
    UnreachableError,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.lease import default_holder

# kubernetes.core's auth options (names, aliases, K8S_AUTH_* variables), so module_defaults and AWX's Kubernetes
# credential carry over. Its kubeconfig option is no_log up to kubernetes.core 6.2, which hides the *path* in
# every message ("cannot load kubeconfig ********"); 6.3+ redacts only the secrets inside a kubeconfig given as a
# dict, and so does this collection on every supported kubernetes.core (kubeconfig_secrets, new_module).
AUTH_ARG_SPEC = copy.deepcopy(K8S_AUTH_ARG_SPEC)
AUTH_ARG_SPEC['kubeconfig'].pop('no_log', None)

# The keys of a kubeconfig whose string values are secrets (kubernetes.core 6.3+'s list, for 5.x which lacks it).
KUBECONFIG_SECRET_KEYS = frozenset(('token', 'password', 'secret', 'client-key-data', 'client-certificate-data',
                                    'certificate-authority-data', 'api_key', 'access-token', 'refresh-token'))

# Every module reads (and the writing ones write) the ledgers and locks in the operator namespace.
OPERATOR_ARG_SPEC = dict(
    operator_namespace=dict(type='str', default='kvquota-system'),
)

# Every module rides through control-plane blips for this many seconds per request (cluster.Cluster).
API_ARG_SPEC = dict(
    api_outage_budget=dict(type='int', default=60),
)

# How a migration target pod is sized, in every module that sizes one (doc fragment sizing_options).
SIZING_ARG_SPEC = dict(
    kubevirt_version=dict(type='str'),
    overhead_ratio=dict(type='str'),
)

# How a reservation is made, with one default per option, wherever one is made (doc fragment reservation_options).
RESERVATION_ARG_SPEC = dict(
    owner=dict(type='str'),
    ttl=dict(type='str', default='2h'),
    safety_margin=dict(type='raw'),
    top_up_cap=dict(type='raw', default='25%'),
    lock_timeout=dict(type='int', default=120),
)


def auth_params(params):
    """The connection options of a module's parameters."""
    return dict((name, params.get(name)) for name in AUTH_ARG_SPEC)


def kubeconfig_secrets(kubeconfig):
    """The secret strings (tokens, passwords, keys, certificate data) in a kubeconfig given as a dict."""
    if not isinstance(kubeconfig, dict):
        return set()
    if extract_sensitive_values_from_kubeconfig is not None:
        return set(extract_sensitive_values_from_kubeconfig(kubeconfig))
    secrets = set()
    pending = [kubeconfig]
    while pending:
        node = pending.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            if key in KUBECONFIG_SECRET_KEYS and isinstance(value, str):
                secrets.add(value)
            elif isinstance(value, (dict, list)):
                pending.append(value)
    return secrets


def connect(options, timeout=cluster_mod.DEFAULT_TIMEOUT, outage_budget=cluster_mod.DEFAULT_OUTAGE_BUDGET):
    """A cluster.Cluster for kubernetes.core's auth options (a module's params, or a dict with the same names or
    the client's aliases), through kubernetes.core's public get_api_client.

    kubernetes.core's rules apply: each option given, else K8S_AUTH_<OPTION>, else K8S_AUTH_<CLIENT NAME>;
    host with api_key, username+password or client_cert+client_key is enough on its own, else a kubeconfig
    or context given loads that kubeconfig (path, "a:b" list, or dict), else the in-cluster service account,
    else the default kubeconfig; options given then override the kubeconfig. TLS verification stays on unless
    validate_certs is false (or the kubeconfig skips it). impersonate_user/impersonate_groups become
    Impersonate-* headers on every request.

    get_api_client discovers the API (GET /version, /apis; its cache file goes to a private temporary directory,
    removed at exit): those requests ride through blips within outage_budget seconds and each attempt ends after
    the timeout (cluster.Cluster.open), so an unreachable or refusing API server fails here, with the request's
    clear error.
    """
    if not HAS_KUBERNETES:
        raise KvquotaError("the Python library 'kubernetes' is required", "pip install kubernetes")
    options = dict((name, value) for name, value in (options or {}).items() if value is not None)
    discovered = {}

    def open_api_client():
        # kubernetes.core loads a kubeconfig into the process-wide default configuration and copies it: start
        # from a clean default so that one connection never inherits another's server or credentials
        kubernetes.client.Configuration.set_default(None)
        # kubernetes.core's discovery reads and writes its cache file in the temporary directory under a name any
        # local user can predict (a hash of the server and, for root, nothing else): a file or a dangling symlink
        # planted there would be read, or written through as this user. A private directory (mode 0700) of this
        # attempt leaves nothing to plant (the discovery then always asks). The kubernetes client writes a
        # kubeconfig's certificate data there too and reads it at every request: the directory goes at exit
        private = tempfile.mkdtemp(prefix="kvquota-connect-")
        atexit.register(shutil.rmtree, private, True)
        shared, tempfile.tempdir = tempfile.tempdir, private
        try:
            dynamic = k8s_client.get_api_client(**options).client
            # the discovery's GET /version: which Kubernetes rules the quota evaluator follows
            discovered["version"] = (getattr(dynamic, "version", None) or {}).get("kubernetes")
            return dynamic.client
        except (CoreException, kubernetes.config.ConfigException, OSError, ValueError, TypeError, KeyError) as err:
            # not the API server's answer (those are the client's ApiException or urllib3's errors): nothing to
            # retry, the configuration is wrong
            raise _configuration_error(options, getattr(err, "__cause__", None) or err)
        finally:
            tempfile.tempdir = shared

    cluster = cluster_mod.Cluster.open(open_api_client, timeout=timeout, outage_budget=outage_budget)
    cluster.server_version = discovered.get("version")
    return cluster


def _auth_option(options, name):
    """An auth option as kubernetes.core reads it: given, else K8S_AUTH_<NAME> (for the names in messages)."""
    return options.get(name) or os.environ.get("K8S_AUTH_%s" % name.upper()) or None


def _configuration_error(options, err):
    """The one clear error for a connection kubernetes.core could not configure (no secret in it: the
    kubeconfig is named by its path only)."""
    reason = " ".join(str(err).split())
    kubeconfig = _auth_option(options, 'kubeconfig')
    context = _auth_option(options, 'context')
    if kubeconfig and not isinstance(kubeconfig, dict):
        paths = [path for path in str(kubeconfig).split(os.pathsep) if path]
        if not any(os.path.exists(os.path.expanduser(path)) for path in paths):
            # the client only says "Invalid kube-config file. No configuration found."
            return InputError("kubeconfig %s does not exist" % kubeconfig,
                              "give the path of a readable kubeconfig (kubeconfig option or K8S_AUTH_KUBECONFIG)")
    if isinstance(err, OSError) and getattr(err, "filename", None):
        # a certificate, key or CA file of the options or the kubeconfig (kubernetes.core reads them at once)
        return InputError("cannot read %s: %s" % (err.filename, err.strerror or reason),
                          "check the paths of ca_cert, client_cert and client_key (K8S_AUTH_SSL_CA_CERT, "
                          "K8S_AUTH_CERT_FILE, K8S_AUTH_KEY_FILE) and in the kubeconfig")
    if isinstance(kubeconfig, dict):
        described = "the kubeconfig given as a dict"
    elif kubeconfig:
        described = "kubeconfig %s" % kubeconfig
    else:
        described = "the default kubeconfig (%s)" % (os.environ.get('KUBECONFIG') or "~/.kube/config")
    if kubeconfig or context:
        return InputError("cannot load %s%s: %s" % (described, " context %s" % context if context else "", reason),
                          "check the kubeconfig path and that the context exists (kubectl config get-contexts)")
    host = _auth_option(options, 'host')
    if host and isinstance(err, ValueError):
        # the discovery's "Host value http://... should start with https:// when talking to HTTPS endpoint"
        return InputError("cannot connect to host %s: %s" % (host, reason),
                          "give the API server's https:// address as host (K8S_AUTH_HOST), with api_key, "
                          "username and password, or client_cert and client_key")
    return UnreachableError(
        "no Kubernetes connection configured: not running in a pod and %s could not be loaded (%s)"
        % (described, reason),
        "give kubeconfig (or K8S_AUTH_KUBECONFIG), or host with api_key (K8S_AUTH_HOST, K8S_AUTH_API_KEY)")


def reservation_owner(params):
    """The owner recorded with a reservation: the owner option, else this run's identity without the pid."""
    if params['owner']:
        return params['owner']
    return default_holder().rsplit(':', 1)[0]


def run_lock(params):
    """The Lease settings of a module's writes. The holder is this very run (user@host:pid), so two jobs with
    the same owner still exclude each other."""
    return {'wait_timeout': params['lock_timeout'], 'holder': default_holder()}


def new_module(argument_spec, **kwargs):
    """An AnsibleModule with the auth, operator_namespace and api_outage_budget options added and the kubernetes
    library checked."""
    spec = dict(AUTH_ARG_SPEC)
    spec.update(OPERATOR_ARG_SPEC)
    spec.update(API_ARG_SPEC)
    spec.update(argument_spec)
    module = AnsibleModule(argument_spec=spec, **kwargs)
    # the kubeconfig option is not no_log (its path must show in errors): the secrets of a dict kubeconfig are
    module.no_log_values.update(kubeconfig_secrets(module.params.get('kubeconfig')))
    if not HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib('kubernetes'), exception=KUBERNETES_IMPORT_ERROR)
    return module


def fail_from_error(module, err):
    """Turn a core error into one clear failure, keeping any partial result the core attached."""
    partial = dict(getattr(err, 'details', {}).get('result') or {})
    partial.pop('diff', None)
    partial.pop('warnings', None)
    partial.pop('msg', None)
    module.fail_json(msg=str(err), error=type(err).__name__, fix=getattr(err, 'fix', None), **partial)


def run(module, operation):
    """Call operation(module) and exit with its result dict, or fail with the core's message.

    The core's warnings (strings: reverts re-applied, new bases kept) become Ansible warnings, and
    its diff is returned only in diff mode.
    """
    try:
        result = operation(module)
    except KvquotaError as err:
        fail_from_error(module, err)
    except Exception as err:   # noqa: a defect; the executor's stopper has cleaned up already (stopper.unexpected)
        module.fail_json(msg="unexpected error %s: %s. Fix: this is a defect of kvquota: report it with the "
                             "traceback (-vvv shows it)" % (type(err).__name__, err),
                         error=type(err).__name__, exception=traceback.format_exc())
    for warning in result.pop('warnings', []):
        module.warn(warning)
    if not module._diff:
        result.pop('diff', None)
    module.exit_json(**result)
