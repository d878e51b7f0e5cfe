# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type


class ModuleDocFragment(object):
    # The same option names, aliases and K8S_AUTH_* variables as kubernetes.core,
    # so module_defaults and AWX's Kubernetes credential work unchanged.
    DOCUMENTATION = r'''
options:
  kubeconfig:
    description:
      - Path to a Kubernetes config file, or the config as a dictionary.
      - Can also be set with the E(K8S_AUTH_KUBECONFIG) environment variable.
      - Without any connection option, C(~/.kube/config) is used, then the in-cluster service account.
    type: raw
  context:
    description:
      - The name of a context found in the config file.
      - Can also be set with the E(K8S_AUTH_CONTEXT) environment variable.
    type: str
  host:
    description:
      - URL of the Kubernetes API server.
      - Can also be set with the E(K8S_AUTH_HOST) environment variable.
    type: str
  api_key:
    description:
      - Bearer token used to authenticate with the API.
      - Can also be set with the E(K8S_AUTH_API_KEY) environment variable.
    type: str
  username:
    description:
      - Username for HTTP basic authentication.
      - Can also be set with the E(K8S_AUTH_USERNAME) environment variable.
    type: str
  password:
    description:
      - Password for HTTP basic authentication.
      - Can also be set with the E(K8S_AUTH_PASSWORD) environment variable.
    type: str
  client_cert:
    description:
      - Path to a client certificate used to authenticate with the API.
      - Can also be set with the E(K8S_AUTH_CERT_FILE) environment variable.
    type: path
    aliases: [cert_file]
  client_key:
    description:
      - Path to the key of O(client_cert).
      - Can also be set with the E(K8S_AUTH_KEY_FILE) environment variable.
    type: path
    aliases: [key_file]
  ca_cert:
    description:
      - Path to the CA certificate (full chain) that signed the API server's certificate.
      - Can also be set with the E(K8S_AUTH_SSL_CA_CERT) environment variable.
    type: path
    aliases: [ssl_ca_cert]
  validate_certs:
    description:
      - Whether to verify the API server's TLS certificate.
      - Can also be set with the E(K8S_AUTH_VERIFY_SSL) environment variable.
      - When unset, the kubeconfig decides, and verification is on unless the kubeconfig
        explicitly disables it.
    type: bool
    aliases: [verify_ssl]
  proxy:
    description:
      - URL of an HTTP proxy to use for the connection.
      - Can also be set with the E(K8S_AUTH_PROXY) environment variable.
    type: str
  no_proxy:
    description:
      - Comma separated hosts, domains or CIDRs that must not go through O(proxy).
      - Can also be set with the E(K8S_AUTH_NO_PROXY) environment variable.
    type: str
  proxy_headers:
    description:
      - Headers sent to the HTTP proxy.
    type: dict
    suboptions:
      proxy_basic_auth:
        description:
          - Colon-separated username:password for proxy basic authentication.
          - Can also be set with the E(K8S_AUTH_PROXY_HEADERS_PROXY_BASIC_AUTH) environment variable.
        type: str
      basic_auth:
        description:
          - Colon-separated username:password for basic authentication.
          - Can also be set with the E(K8S_AUTH_PROXY_HEADERS_BASIC_AUTH) environment variable.
        type: str
      user_agent:
        description:
          - User agent string.
          - Can also be set with the E(K8S_AUTH_PROXY_HEADERS_USER_AGENT) environment variable.
        type: str
  persist_config:
    description:
      - Whether to save refreshed tokens back to the kubeconfig file.
      - Can also be set with the E(K8S_AUTH_PERSIST_CONFIG) environment variable.
    type: bool
  impersonate_user:
    description:
      - Username to impersonate for the operation.
      - Can also be set with the E(K8S_AUTH_IMPERSONATE_USER) environment variable.
    type: str
  impersonate_groups:
    description:
      - Groups to impersonate for the operation.
      - Can also be set with the E(K8S_AUTH_IMPERSONATE_GROUPS) environment variable, comma separated.
    type: list
    elements: str
requirements:
  - python >= 3.9
  - kubernetes >= 24.2.0
notes:
  - Secrets given as options (O(api_key), O(password), a dictionary O(kubeconfig)) are never logged.
'''
