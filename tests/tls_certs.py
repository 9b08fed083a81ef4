"""Test certificates (trustme): a CA, a server certificate for 127.0.0.1 and localhost, a
client certificate, and a second CA nobody trusts, written as PEM files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Certs:
    ca: str                 # the CA that signed everything below (PEM)
    server: str             # server certificate chain + key, for 127.0.0.1 / localhost
    server_other_host: str  # signed by the CA, but for another host name only
    client: str             # client certificate chain + key
    other_ca: str           # a CA that signed nothing here
    rogue_server: str       # a server certificate signed by other_ca


def make_certs(d: Path) -> Certs:
    import trustme

    d.mkdir(parents=True, exist_ok=True)
    ca, other = trustme.CA(), trustme.CA()

    def write(name: str, blob) -> str:  # type: ignore[no-untyped-def]
        path = d / name
        blob.write_to_path(str(path))
        return str(path)

    return Certs(
        ca=write("ca.pem", ca.cert_pem),
        server=write("server.pem", ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem),
        server_other_host=write("other-host.pem",
                                ca.issue_cert("broker.example.internal").private_key_and_cert_chain_pem),
        client=write("client.pem", ca.issue_cert("spark-client@example").private_key_and_cert_chain_pem),
        other_ca=write("other-ca.pem", other.cert_pem),
        rogue_server=write("rogue.pem", other.issue_cert("127.0.0.1").private_key_and_cert_chain_pem),
    )
