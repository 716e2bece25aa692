"""Certificates and keys for the local test cluster, made with the openssl command (Debian's
openssl; no Python dependency): a CA, serving certificates signed by it for 127.0.0.1, and the
service-account signing key pair. All of it lives in the cluster's temp folder for one run."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

DAYS = "2"


class CertError(RuntimeError):
    pass


def _openssl(*args: str, cwd: Path) -> None:
    binary = shutil.which("openssl")
    if not binary:
        raise CertError("openssl not found: the local cluster makes its certificates with it (apt-get install openssl)")
    # A CA with its 2048-bit key: 0.08-0.15 s here (load 0.5); 60 s only stops an openssl that hangs.
    proc = subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise CertError(f"openssl {args[0]} failed: {proc.stderr.strip()}")


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


def ca(folder: Path, name: str = "ca") -> Pair:
    folder.mkdir(parents=True, exist_ok=True)
    pair = Pair(folder / f"{name}.crt", folder / f"{name}.key")
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", DAYS, "-subj", f"/CN=mooncake-pd-test-{name}",
        "-keyout", str(pair.key), "-out", str(pair.cert), cwd=folder,
    )  # fmt: skip
    return pair


def serving(folder: Path, authority: Pair, name: str, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> Pair:
    """A serving certificate for `hosts` (IP addresses or DNS names), signed by `authority`."""
    pair = Pair(folder / f"{name}.crt", folder / f"{name}.key")
    csr = folder / f"{name}.csr"
    names = ",".join(f"IP:{h}" if h.replace(".", "").isdigit() else f"DNS:{h}" for h in hosts)
    ext = folder / f"{name}.ext"
    ext.write_text(f"subjectAltName={names}\nextendedKeyUsage=serverAuth,clientAuth\n")
    subject = f"/CN={name}"
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", str(pair.key), "-out", str(csr), cwd=folder
    )
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(authority.cert), "-CAkey", str(authority.key), "-CAcreateserial",
        "-days", DAYS, "-extfile", str(ext), "-out", str(pair.cert), cwd=folder,
    )  # fmt: skip
    return pair


def signing_key(folder: Path, name: str = "service-account") -> Pair:
    """An RSA key pair (`cert` is the public key): kube-apiserver signs service-account tokens."""
    pair = Pair(folder / f"{name}.pub", folder / f"{name}.key")
    _openssl("genrsa", "-out", str(pair.key), "2048", cwd=folder)
    _openssl("rsa", "-in", str(pair.key), "-pubout", "-out", str(pair.cert), cwd=folder)
    return pair
