# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type


class ModuleDocFragment(object):
    # The connection options. Their argument spec and the client configuration come from kubernetes.core
    # (args_common.AUTH_ARG_SPEC, its client code); they are documented here, in this collection's own words, so
    # that the modules' documentation renders where the collection is imported without its dependencies (Galaxy's
    # and Automation Hub's importers install none). tests/unit/plugins/doc_fragments keeps the names, types,
    # aliases and sub-options in step with kubernetes.core.k8s_auth_options wherever kubernetes.core is installed.
    DOCUMENTATION = r'''
options:
  host:
    description:
      - The URL of the Kubernetes API server.
      - Also read from the environment variable E(K8S_AUTH_HOST).
    type: str
  api_key:
    description:
      - A bearer token to authenticate with.
      - Also read from E(K8S_AUTH_API_KEY).
    type: str
  kubeconfig:
    description:
      - The kubeconfig to load, as a path (several joined with the OS path separator, as in E(KUBECONFIG)) or as
        the kubeconfig itself given as a dictionary.
      - Without it, and without O(host) with credentials, the service account of the pod the module runs in is
        used, else C(~/.kube/config).
      - Also read from E(K8S_AUTH_KUBECONFIG).
    type: raw
  context:
    description:
      - The kubeconfig context to use.
      - Also read from E(K8S_AUTH_CONTEXT).
    type: str
  username:
    description:
      - A user name for basic authentication against the API server.
      - Also read from E(K8S_AUTH_USERNAME).
    type: str
  password:
    description:
      - The password for O(username).
      - Also read from E(K8S_AUTH_PASSWORD).
    type: str
  client_cert:
    description:
      - A client certificate file to authenticate with.
      - Also read from E(K8S_AUTH_CERT_FILE).
    type: path
    aliases: [cert_file]
  client_key:
    description:
      - The key file of O(client_cert).
      - Also read from E(K8S_AUTH_KEY_FILE).
    type: path
    aliases: [key_file]
  ca_cert:
    description:
      - A CA certificate file to verify the API server's certificate with.
      - Also read from E(K8S_AUTH_SSL_CA_CERT).
    type: path
    aliases: [ssl_ca_cert]
  validate_certs:
    description:
      - Whether to verify the API server's TLS certificate. Verification stays on unless this is V(false) or the
        kubeconfig turns it off.
      - Also read from E(K8S_AUTH_VERIFY_SSL).
    type: bool
    aliases: [verify_ssl]
  proxy:
    description:
      - An HTTP proxy URL to reach the API server through.
      - Also read from E(K8S_AUTH_PROXY).
    type: str
  no_proxy:
    description:
      - Hosts (comma-separated) reached without the proxy.
      - Also read from E(K8S_AUTH_NO_PROXY).
    type: str
  proxy_headers:
    description:
      - Headers to send to the proxy.
    type: dict
    suboptions:
      proxy_basic_auth:
        description:
          - V(user:password) for the proxy's basic authentication.
          - Also read from E(K8S_AUTH_PROXY_HEADERS_PROXY_BASIC_AUTH).
        type: str
      basic_auth:
        description:
          - V(user:password) for a basic authentication header.
          - Also read from E(K8S_AUTH_PROXY_HEADERS_BASIC_AUTH).
        type: str
      user_agent:
        description:
          - The user agent to send, such as V(foo/1.0).
          - Also read from E(K8S_AUTH_PROXY_HEADERS_USER_AGENT).
        type: str
  persist_config:
    description:
      - Whether a token refreshed while loading the kubeconfig is written back to the kubeconfig file.
      - Also read from E(K8S_AUTH_PERSIST_CONFIG).
    type: bool
  impersonate_user:
    description:
      - The user to act as (the Impersonate-User header on every request).
      - Also read from E(K8S_AUTH_IMPERSONATE_USER).
    type: str
  impersonate_groups:
    description:
      - The groups to act as (Impersonate-Group headers on every request).
      - Also read from E(K8S_AUTH_IMPERSONATE_GROUPS).
    type: list
    elements: str
notes:
  - The connection follows kubernetes.core's rules. Each option given wins over its E(K8S_AUTH_*) variable; options
    given override what the kubeconfig says.
  - Requires the Python library C(kubernetes).
'''
