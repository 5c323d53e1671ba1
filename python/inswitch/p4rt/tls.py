"""P4Runtime over TLS with client certificates, as production switch agents offer it: the
switch proves itself with a certificate, and accepts only controllers whose certificate its
CA signed (mutual TLS). One place for the server's and the client's credentials."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import grpc

#: The three options and how they are named in messages.
OPTIONS = "--tls-cert, --tls-key and --tls-ca"


def pem_file(path: str) -> str:
    """A readable PEM file (a certificate or key); raises ValueError saying why not. For the
    CLI's option types, so a bad path is a usage error before the switch starts."""
    try:
        text = Path(path).read_bytes()
    except OSError as e:
        raise ValueError(e.strerror or str(e)) from None
    if b"-----BEGIN " not in text:
        raise ValueError("no PEM block (-----BEGIN ...) in it")
    return path


@dataclass(frozen=True)
class TlsFiles:
    """PEM files: our certificate chain and its key, and the CA that signs the other side."""

    cert: Optional[str] = None
    key: Optional[str] = None
    ca: Optional[str] = None

    @property
    def enabled(self) -> bool:
        return any((self.cert, self.key, self.ca))

    def _read(self, path: Optional[str]) -> Optional[bytes]:
        return Path(path).read_bytes() if path else None

    def server_credentials(self) -> grpc.ServerCredentials:
        """The switch's side: all three files are needed, and a client must present a
        certificate the CA signed (`require_client_auth`)."""
        if not (self.cert and self.key and self.ca):
            raise ValueError(f"{OPTIONS} go together: give all three or none")
        return grpc.ssl_server_credentials([(self._read(self.key), self._read(self.cert))],
                                           root_certificates=self._read(self.ca), require_client_auth=True)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """A controller's side: `ca` checks the switch (the system's CAs when None); `cert` and
        `key`, given together, are the certificate we present."""
        if bool(self.cert) != bool(self.key):
            raise ValueError("tls_cert and tls_key go together")
        return grpc.ssl_channel_credentials(root_certificates=self._read(self.ca), private_key=self._read(self.key),
                                            certificate_chain=self._read(self.cert))
