"""A throwaway PKI for the test control plane: CA, serving and admin certificates, the
service-account signing key, and JWT decoding for the tokens it signs."""

from __future__ import annotations

import base64
import datetime as _dt
import ipaddress
import json
from pathlib import Path


def _write_pem(path: Path, data: bytes, mode: int = 0o600) -> None:
    path.write_bytes(data)
    path.chmod(mode)


class PKI:
    """A throwaway CA, serving cert, admin client cert and SA signing key."""

    def __init__(self, d: Path):
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec, rsa
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        self.dir = d
        d.mkdir(parents=True, exist_ok=True)
        now = _dt.datetime.now(_dt.UTC) - _dt.timedelta(minutes=5)
        later = now + _dt.timedelta(days=2)

        def key():
            return ec.generate_private_key(ec.SECP256R1())

        def pem_key(k) -> bytes:
            return k.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )

        def name(cn: str, org: str | None = None):
            attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
            if org:
                attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
            return x509.Name(attrs)

        ca_key = key()
        ca_name = name("edgefd-test-ca")
        ca = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(later)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(ca_key, hashes.SHA256())
        )

        def leaf(cn: str, org: str | None, server: bool):
            k = key()
            b = (
                x509.CertificateBuilder()
                .subject_name(name(cn, org))
                .issuer_name(ca_name)
                .public_key(k.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now)
                .not_valid_after(later)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(
                    x509.ExtendedKeyUsage(
                        [
                            ExtendedKeyUsageOID.SERVER_AUTH
                            if server
                            else ExtendedKeyUsageOID.CLIENT_AUTH
                        ]
                    ),
                    critical=False,
                )
            )
            if server:
                b = b.add_extension(
                    x509.SubjectAlternativeName(
                        [
                            x509.DNSName("localhost"),
                            x509.DNSName("kubernetes"),
                            x509.DNSName("kubernetes.default.svc"),
                            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                            x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
                        ]
                    ),
                    critical=False,
                )
            return k, b.sign(ca_key, hashes.SHA256())

        pem = serialization.Encoding.PEM
        self.ca_crt = d / "ca.crt"
        _write_pem(self.ca_crt, ca.public_bytes(pem), 0o644)
        self.ca_key = d / "ca.key"
        _write_pem(self.ca_key, pem_key(ca_key))

        k, c = leaf("kube-apiserver", None, server=True)
        self.server_crt, self.server_key = d / "apiserver.crt", d / "apiserver.key"
        _write_pem(self.server_crt, c.public_bytes(pem), 0o644)
        _write_pem(self.server_key, pem_key(k))

        self._leaf, self._pem_key = leaf, pem_key
        self.admin_crt, self.admin_key = self.client_cert("admin", "edgefd-admin", "system:masters")

        sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.sa_key, self.sa_pub = d / "sa.key", d / "sa.pub"
        _write_pem(self.sa_key, pem_key(sa))
        _write_pem(
            self.sa_pub,
            sa.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo),
            0o644,
        )

    def client_cert(self, stem: str, cn: str, org: str | None = None) -> tuple[Path, Path]:
        """A client certificate signed by this CA, written as ``<stem>.crt`` / ``<stem>.key``:
        the user ``cn`` in group ``org`` (a kubelet is ``system:node:<name>`` in
        ``system:nodes``, which the Node authorizer and NodeRestriction recognise)."""
        from cryptography.hazmat.primitives import serialization

        k, c = self._leaf(cn, org, server=False)
        crt, key = self.dir / f"{stem}.crt", self.dir / f"{stem}.key"
        _write_pem(crt, c.public_bytes(serialization.Encoding.PEM), 0o644)
        _write_pem(key, self._pem_key(k))
        return crt, key


def decode_jwt(token: str) -> dict:
    """The (unverified) claims of a JWT."""
    payload = token.split(".")[1]
    payload += "=" * (-len(payload) % 4)
    return json.loads(base64.urlsafe_b64decode(payload))
