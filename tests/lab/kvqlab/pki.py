"""Certificates and keys for a lab, made with the openssl command line.

EC P-256 keys throughout (fast to generate). One CA; one serving certificate for
every loopback endpoint (SANs 127.0.0.1, localhost and the in-cluster names of the
kubernetes service), used by kube-apiserver, kube-controller-manager and
kube-scheduler so that every TLS connection in the lab verifies against ca.crt;
one client certificate for kube-apiserver's front proxy (aggregated APIs); one key pair for
signing service-account tokens.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SERVING_SANS = (
    "IP:127.0.0.1",
    "DNS:localhost",
    "DNS:kubernetes",
    "DNS:kubernetes.default",
    "DNS:kubernetes.default.svc",
    "DNS:kubernetes.default.svc.cluster.local",
)


class PKIError(RuntimeError):
    pass


def _openssl(*args: str, cwd: Path) -> None:
    exe = shutil.which("openssl")
    if not exe:
        raise PKIError("openssl is not installed; the lab needs it to make its CA and serving certificate")
    res = subprocess.run([exe, *args], cwd=str(cwd), capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise PKIError(f"openssl {' '.join(args[:2])} failed: {res.stderr.strip()}")


def make_pki(pki_dir: Path) -> dict[str, Path]:
    """Create (overwrite) ca.crt/key, serving.crt/key, sa.key/pub in pki_dir."""
    d = Path(pki_dir)
    d.mkdir(parents=True, exist_ok=True)
    d.chmod(0o700)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "3650",
             "-subj", "/CN=kvquota-lab-ca",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-addext", "subjectKeyIdentifier=hash", cwd=d)
    (d / "serving.ext").write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid\n"
        f"subjectAltName={','.join(SERVING_SANS)}\n"
    )
    _openssl("req", *ec, "-keyout", "serving.key", "-out", "serving.csr",
             "-subj", "/CN=kvquota-lab-loopback", cwd=d)
    _openssl("x509", "-req", "-in", "serving.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "3650", "-sha256", "-extfile", "serving.ext",
             "-out", "serving.crt", cwd=d)
    # kube-apiserver's front-proxy client certificate: how it authenticates to an aggregated API
    # (the lab's virt-api subresources, kvqlab.virtapi)
    (d / "front-proxy.ext").write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=clientAuth\n"
    )
    _openssl("req", *ec, "-keyout", "front-proxy.key", "-out", "front-proxy.csr",
             "-subj", "/CN=kvqlab-front-proxy", cwd=d)
    _openssl("x509", "-req", "-in", "front-proxy.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "3650", "-sha256", "-extfile", "front-proxy.ext",
             "-out", "front-proxy.crt", cwd=d)
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-out", "sa.key", cwd=d)
    _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)
    for key in ("ca.key", "serving.key", "front-proxy.key", "sa.key"):
        (d / key).chmod(0o600)
    return {
        "ca_crt": d / "ca.crt",
        "ca_key": d / "ca.key",
        "serving_crt": d / "serving.crt",
        "serving_key": d / "serving.key",
        "front_proxy_crt": d / "front-proxy.crt",
        "front_proxy_key": d / "front-proxy.key",
        "sa_key": d / "sa.key",
        "sa_pub": d / "sa.pub",
    }
