"""virt-api's eviction webhook, served by the emulator over HTTPS for the lab's kube-apiserver.

KubeVirt's virt-operator installs the ValidatingWebhookConfiguration `virt-api-validator` with the webhook
`virt-launcher-eviction-interceptor.kubevirt.io` on pods/eviction (all operations, failurePolicy Fail,
timeout 10 s, match condition `object.metadata.name.startsWith("virt-launcher")`), served by virt-api at
/pod-eviction-validate. The emulator installs the same configuration pointing at its own loopback port
(the lab's serving certificate names 127.0.0.1; the CA is the lab's), so `kubectl drain` and any other
Eviction API client meet KubeVirt's answer: the eviction of a live-migratable launcher pod is refused with
429 and the VMI is marked for evacuation (status.evacuationNodeName), which the evacuation controller acts on.
"""
import base64
import json
import logging
import os
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kubernetes.client.exceptions import ApiException

log = logging.getLogger("virt-api")

WEBHOOK_CONFIGURATION = "virt-api-validator"
EVICTION_WEBHOOK = "virt-launcher-eviction-interceptor.kubevirt.io"
EVICTION_PATH = "/pod-eviction-validate"
VWC_PATH = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


def webhook_configuration(port, ca_pem):
    """KubeVirt's eviction webhook registration, with a URL client config instead of virt-api's Service."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIGURATION,
                     "labels": {"kubevirt.io": WEBHOOK_CONFIGURATION,
                                "app.kubernetes.io/managed-by": "virt-operator"}},
        "webhooks": [{
            "name": EVICTION_WEBHOOK,
            "admissionReviewVersions": ["v1"],
            "failurePolicy": "Fail",
            "timeoutSeconds": 10,
            "sideEffects": "NoneOnDryRun",
            "rules": [{"operations": ["*"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["pods/eviction"]}],
            "clientConfig": {"url": "https://127.0.0.1:%d%s" % (port, EVICTION_PATH),
                             "caBundle": base64.b64encode(ca_pem).decode()},
            "matchConditions": [{"name": "only-vms",
                                 "expression": 'object.metadata.name.startsWith("virt-launcher")'}],
        }],
    }


def install(rest, port, ca_pem):
    """Create or replace the configuration so that it points at this process's port."""
    body = webhook_configuration(port, ca_pem)
    try:
        rest.create(VWC_PATH, body)
    except ApiException as exc:
        if exc.status != 409:
            raise
        cur = rest.get(VWC_PATH + "/" + WEBHOOK_CONFIGURATION)
        body["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
        rest.replace(VWC_PATH + "/" + WEBHOOK_CONFIGURATION, body)


def uninstall(rest):
    try:
        rest.delete(VWC_PATH + "/" + WEBHOOK_CONFIGURATION)
    except ApiException as exc:
        if exc.status != 404:
            raise


def _handler(admit):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # noqa: N802 - BaseHTTPRequestHandler's name
            log.debug("%s " + fmt, self.address_string(), *args)

        def do_POST(self):  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            review = json.loads(self.rfile.read(length) or b"{}")
            request = review.get("request") or {}
            try:
                response = admit(request) if self.path.split("?")[0] == EVICTION_PATH else {"allowed": True}
            except Exception as exc:  # noqa: BLE001 - answer the apiserver rather than drop the connection
                log.exception("eviction admission failed")
                response = {"allowed": False, "status": {"code": 429, "message": "kubevirt failed: %s" % exc}}
            response["uid"] = request.get("uid")
            data = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                               "response": response}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
    return Handler


class LoopbackServer:
    """An HTTP server on a loopback port (0: any free one), serving handler on a daemon thread named name; over TLS
    with cert and key when given. start() returns it; port is the one bound."""

    def __init__(self, handler, name, port=0, cert=None, key=None):
        self.server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.server.daemon_threads = True
        if cert:
            tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            tls.load_cert_chain(cert, key)
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name=name, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class EvictionWebhook(LoopbackServer):
    """The HTTPS server (a daemon thread) answering the apiserver's AdmissionReviews with admit(request)."""

    def __init__(self, admit, cert, key, port=0):
        LoopbackServer.__init__(self, _handler(admit), "eviction-webhook", port, cert, key)


def lab_certificates(kubeconfig_ca):
    """(serving cert, key, CA PEM) of the lab, found beside the CA file its kubeconfig names."""
    pki = os.path.dirname(kubeconfig_ca)
    with open(kubeconfig_ca, "rb") as fh:
        ca_pem = fh.read()
    return os.path.join(pki, "serving.crt"), os.path.join(pki, "serving.key"), ca_pem
