"""KubeVirt's virt-api subresources for the lab: PUT .../virtualmachines/<name>/start and /stop of the
aggregated API group subresources.kubevirt.io/v1 (what `virtctl start/stop` call).

    python3 -m kvqlab.virtapi --port P --cert C --key K --client-ca CA --admin-kubeconfig KC

The lab's kube-apiserver proxies the group here (an APIService; kube-apiserver authenticates and
authorises the caller with RBAC on virtualmachines/start and virtualmachines/stop, and audits the request),
over TLS with its front-proxy client certificate, which this server requires. The change is what virt-api
does: the VM's spec.running, or its runStrategy (Halted <-> Always), written by this server's admin
identity, conditionally on the VM's resourceVersion. Like KubeVirt it answers 409 to a stop of a VM that
is not running and to a start of one that runs; runStrategy Manual (KubeVirt's state-change requests) is
not emulated (400). Loopback only.
"""
from __future__ import annotations

import argparse
import json
import logging
import re
import ssl
import sys
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml

GROUP = "subresources.kubevirt.io"
VERSION = "v1"
FRONT_PROXY_CN = "kvqlab-front-proxy"
SERVICE = ("default", "kvqlab-virt-api")
_PATH = re.compile(r"^/apis/subresources\.kubevirt\.io/v1/namespaces/([^/]+)/virtualmachines/([^/]+)/(start|stop)$")

log = logging.getLogger("kvqlab.virtapi")


def api_service(port: int) -> list[dict]:
    """The Service (ExternalName: loopback) and APIService that route the group to this server."""
    return [
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": SERVICE[1], "namespace": SERVICE[0], "labels": {"app.kubernetes.io/managed-by": "kvqlab"}},
         "spec": {"type": "ExternalName", "externalName": "localhost", "ports": [{"port": port}]}},
        {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
         "metadata": {"name": f"{VERSION}.{GROUP}", "labels": {"app.kubernetes.io/managed-by": "kvqlab"}},
         "spec": {"group": GROUP, "version": VERSION, "groupPriorityMinimum": 1000, "versionPriority": 15,
                  "service": {"namespace": SERVICE[0], "name": SERVICE[1], "port": port},
                  # the lab's serving certificate names 127.0.0.1/localhost, not <service>.<namespace>.svc
                  "insecureSkipTLSVerify": True}},
    ]


def resource_list() -> dict:
    verbs = ["update"]
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{GROUP}/{VERSION}",
            "resources": [{"name": "virtualmachines/start", "singularName": "", "namespaced": True,
                           "kind": "VirtualMachine", "verbs": verbs},
                          {"name": "virtualmachines/stop", "singularName": "", "namespaced": True,
                           "kind": "VirtualMachine", "verbs": verbs}]}


def group_list() -> dict:
    gv = {"groupVersion": f"{GROUP}/{VERSION}", "version": VERSION}
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [{"name": GROUP, "versions": [gv], "preferredVersion": gv}]}


def power_change(vm: dict, action: str, has_vmi: bool) -> tuple[int, dict | str]:
    """(200, spec change) or (error code, message) for start/stop of vm, as virt-api decides it."""
    spec = vm.get("spec") or {}
    if "running" in spec and spec.get("runStrategy") is None:
        running = bool(spec["running"])
        if action == "stop":
            if not running and not has_vmi:
                return 409, "VM is not running"
            return 200, {"running": False}
        if running:
            return 409, "VM is already running"
        return 200, {"running": True}
    strategy = spec.get("runStrategy") or "Halted"
    if strategy == "Manual":
        return 400, "runStrategy Manual is not emulated by the lab's virt-api"
    if action == "stop":
        if strategy == "Halted" and not has_vmi:
            return 409, "VM is not running"
        return 200, {"runStrategy": "Halted"}
    if strategy != "Halted":
        return 409, "VM is already running"
    return 200, {"runStrategy": "Always"}


class Admin:
    """Requests to the lab's kube-apiserver as the admin identity of a kubeconfig."""

    def __init__(self, kubeconfig: str):
        config = yaml.safe_load(open(kubeconfig).read())
        cluster = config["clusters"][0]["cluster"]
        self.server = cluster["server"]
        self.token = config["users"][0]["user"]["token"]
        self.tls = ssl.create_default_context(cafile=cluster["certificate-authority"])

    def request(self, method: str, path: str, body: dict | None = None,
                content_type: str = "application/json") -> tuple[int, dict]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self.token)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self.tls, timeout=30) as resp:
                return resp.status, _decode(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, _decode(exc.read())


def _decode(raw: bytes) -> dict:
    """A JSON body, or {'message': text} (e.g. '404 page not found' for an API that is not served)."""
    try:
        return json.loads(raw or b"{}")
    except ValueError:
        return {"message": raw.decode(errors="replace").strip()}


def make_handler(admin: Admin):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # noqa: N802 - BaseHTTPRequestHandler's name
            log.info("%s %s", self.headers.get("X-Remote-User", "-"), fmt % args)

        def _send(self, code: int, body: dict | None = None) -> None:
            data = json.dumps(body).encode() if body is not None else b""
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _status(self, code: int, message: str) -> None:
            reason = {400: "BadRequest", 404: "NotFound", 409: "Conflict"}.get(code, "InternalError")
            self._send(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                              "reason": reason, "code": code})

        def do_GET(self):  # noqa: N802
            path = self.path.split("?", 1)[0]
            if path == "/apis":
                self._send(200, group_list())
            elif path in (f"/apis/{GROUP}", f"/apis/{GROUP}/"):
                self._send(200, group_list()["groups"][0] | {"kind": "APIGroup", "apiVersion": "v1"})
            elif path.rstrip("/") == f"/apis/{GROUP}/{VERSION}":
                self._send(200, resource_list())
            elif path in ("/healthz", "/readyz", "/livez"):
                self._send(200, {})
            else:
                self._status(404, f"{path} not found")

        def do_PUT(self):  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            match = _PATH.match(self.path.split("?", 1)[0])
            if not match:
                self._status(404, f"{self.path} not found")
                return
            ns, name, action = match.groups()
            vm_path = f"/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachines/{name}"
            code, vm = admin.request("GET", vm_path)
            if code != 200:
                self._status(code, f"virtualmachine {ns}/{name}: {vm.get('message') or code}")
                return
            vmi_code, _vmi = admin.request("GET", f"/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances/{name}")
            code, change = power_change(vm, action, vmi_code == 200)
            if code != 200:
                self._status(code, change)
                return
            body = {"metadata": {"resourceVersion": vm["metadata"]["resourceVersion"]}, "spec": change}
            code, out = admin.request("PATCH", vm_path, body, "application/merge-patch+json")
            if code != 200:
                self._status(code, out.get("message") or f"patch of {ns}/{name}: {code}")
                return
            log.info("%s %s/%s: spec %s", action, ns, name, change)
            self._send(202)

        def do_POST(self):  # noqa: N802
            self._status(404, f"{self.path} not found")

    return Handler


def serve(port: int, cert: str, key: str, client_ca: str, admin_kubeconfig: str) -> None:
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    # only kube-apiserver's front proxy may call: it has authenticated and authorised the user
    tls.load_verify_locations(client_ca)
    tls.verify_mode = ssl.CERT_REQUIRED
    server = ThreadingHTTPServer(("127.0.0.1", port), make_handler(Admin(admin_kubeconfig)))
    server.daemon_threads = True
    inner = server.get_request

    def get_request():
        conn, addr = inner()
        conn = tls.wrap_socket(conn, server_side=True)
        subject = dict(item[0] for item in conn.getpeercert().get("subject", ()))
        if subject.get("commonName") != FRONT_PROXY_CN:
            conn.close()
            raise OSError(f"client certificate {subject} is not the front proxy's")
        return conn, addr
    server.get_request = get_request
    log.info("virt-api subresources on 127.0.0.1:%d", port)
    server.serve_forever()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m kvqlab.virtapi", description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--client-ca", required=True)
    ap.add_argument("--admin-kubeconfig", required=True)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    serve(args.port, args.cert, args.key, args.client_ca, args.admin_kubeconfig)
    return 0


if __name__ == "__main__":
    sys.exit(main())
