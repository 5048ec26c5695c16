"""The cluster secret: how a node of this cluster proves it is one before any frame is read.

Theory of operation
-------------------
Kafka keeps clients off the controllers' and brokers' private conversations with separate
listeners (``controller.listener.names``, ``inter.broker.listener.name``) and, in production,
SASL/mTLS on them. Here the inter-node listeners are guarded by one *cluster secret*: random
bytes made when the cluster is launched (``generate``), written to a file of mode 0600 in the
cluster's directory and passed to child processes in an environment variable, never on a
command line (``ps`` shows command lines to every user).

The handshake is a challenge-response, before any Kafka frame:

1. the listener sends ``NONCE_BYTES`` random bytes (never the same twice);
2. the connecting node answers with HMAC-SHA256(secret, ``CONTEXT`` + nonce);
3. the listener compares in constant time; a wrong or late answer closes the connection,
   and nothing the connection sent is ever delivered to the node.

The secret itself never crosses the network, and a recorded answer is useless for another
connection (another nonce). This authenticates the connecting side only: the listener's
side is trusted to be where the cluster's configuration says (a local process that could
bind that port could also read our memory).

Never: log the secret or put it on a command line; accept an inter-node frame on a
connection that has not passed the handshake.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from minikafka.errors import IllegalArgumentError

SECRET_ENV = "MINIKAFKA_CLUSTER_SECRET"  # hex; popped from the environment by the child that reads it
SECRET_FILE = "cluster.secret"  # in the cluster's directory, mode 0600
NONCE_BYTES = 32
ANSWER_BYTES = hashlib.sha256().digest_size
CONTEXT = b"minikafka inter-node listener v1\0"
HANDSHAKE_TIMEOUT_S = 10.0


def generate() -> bytes:
    return secrets.token_bytes(32)


def save(secret: bytes, directory: str | Path) -> Path:
    """Write ``secret`` (hex) to ``directory/cluster.secret``, readable by its owner only."""
    path = Path(directory) / SECRET_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an older file of another mode keeps its mode through O_CREAT
        os.write(fd, secret.hex().encode())
    finally:
        os.close(fd)
    return path


def parse(text: str, where: str) -> bytes:
    try:
        secret = bytes.fromhex(text.strip())
    except ValueError:
        raise IllegalArgumentError(f"the cluster secret in {where} is not hex") from None
    if len(secret) < 16:
        raise IllegalArgumentError(f"the cluster secret in {where} is {len(secret)} bytes; at least 16 are needed")
    return secret


def load(path: str | Path) -> bytes:
    path = Path(path)
    try:
        return parse(path.read_text(), str(path))
    except OSError as e:
        raise IllegalArgumentError(f"cannot read the cluster secret: {e}") from None


def from_environment() -> bytes | None:
    """The secret a launcher passed in ``MINIKAFKA_CLUSTER_SECRET`` (removed from the
    environment, so that no grandchild inherits it by accident); None if none was."""
    text = os.environ.pop(SECRET_ENV, None)
    return None if text is None else parse(text, f"${SECRET_ENV}")


def challenge() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)


def answer(secret: bytes, nonce: bytes) -> bytes:
    return hmac.new(secret, CONTEXT + nonce, hashlib.sha256).digest()


def verify(secret: bytes, nonce: bytes, response: bytes) -> bool:
    return hmac.compare_digest(answer(secret, nonce), response)
