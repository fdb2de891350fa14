"""What the HTTP adapters (Prometheus, Alertmanager) share: credentials read from files, and TLS diagnosis.

Why a module: both talk to servers that in production sit behind https with a private CA and a token or
password mounted from a Secret. The rules are the same for both and must stay the same: a secret file is
re-read before every request (projected service-account tokens and rotated Secrets change under a running
process), stripped (Secret files often end in a newline), and an unreadable or empty file is an error that
names the file, never a request sent without credentials. A failed certificate check is recognised in the
transport error's chain so that the adapter can say "TLS verification failed" instead of a generic
connection error, and not retry what cannot succeed.
"""

from __future__ import annotations

import ssl
from os import PathLike
from pathlib import Path

StrPath = str | PathLike[str]


class SecretFileError(Exception):
    """A token or password file that cannot be used; the message names the file. Adapters re-raise it as
    their own error type."""


def read_secret(path: Path, what: str) -> str:
    """The secret in ``path``, stripped; ``SecretFileError`` when it cannot be read or is empty."""
    try:
        secret = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise SecretFileError(f"cannot read {what} {path}: {exc}") from None
    if not secret:
        raise SecretFileError(f"{what} {path} is empty")
    return secret


def tls_verification_error(exc: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate verification failure behind a transport error, if that is what it is."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, ssl.SSLCertVerificationError):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None
