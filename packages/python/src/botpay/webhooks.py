"""Webhook signatures of the Bot Payment Service, checked with the standard library.

Every delivery carries two signatures (the service's webhook documentation):

* ``X-Service-Signature: sha256=<hex>``, the HMAC-SHA256 of the raw body keyed with the
  ``webhook_secret`` as text;
* the Standard Webhooks headers ``webhook-id`` (the event id), ``webhook-timestamp`` (Unix
  seconds) and ``webhook-signature`` (``v1,<base64>`` of the HMAC-SHA256 of
  ``"{id}.{timestamp}." + body``, keyed with the base64-decoded part after ``whsec_``; during a
  secret rotation one ``v1`` signature per secret, separated by spaces).

Pass the raw bytes as received: a re-serialised JSON body will not verify.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

__all__ = [
    "DEFAULT_TOLERANCE_SECONDS",
    "WebhookVerificationError",
    "sign_payload",
    "verify_signature",
    "sign_standard",
    "verify_standard_webhook",
    "verify_webhook",
]

#: How far ``webhook-timestamp`` may be from the receiver's clock (5 minutes).
DEFAULT_TOLERANCE_SECONDS = 300

_SERVICE_SIGNATURE = re.compile(r"^sha256=([0-9a-fA-F]{64})$")
_TIMESTAMP = re.compile(r"^\d{1,12}$")
_NOT_BASE64 = re.compile(r"[^A-Za-z0-9+/]")

Body = Union[str, bytes, bytearray]
Secret = Union[str, Sequence[str]]


class WebhookVerificationError(Exception):
    """A delivery that must not be trusted; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _bytes(body: Body) -> bytes:
    return body.encode("utf-8") if isinstance(body, str) else bytes(body)


def _secrets(secret: Secret) -> List[str]:
    items = [secret] if isinstance(secret, str) else list(secret)
    return [s for s in items if isinstance(s, str) and s]


def _base64(text: str) -> bytes:
    """Base64 read the way the service reads it (Node's Buffer): both alphabets, other characters
    skipped, decoding ends at the first "=", a lone trailing character ignored. Never raises."""
    body = text.split("=", 1)[0].replace("-", "+").replace("_", "/")
    body = _NOT_BASE64.sub("", body)
    if len(body) % 4 == 1:
        body = body[:-1]
    try:
        return base64.b64decode(body + "=" * (-len(body) % 4))
    except (binascii.Error, ValueError):
        return b""


def _standard_key(secret: str) -> bytes:
    return _base64(secret[6:] if secret.startswith("whsec_") else secret)


def sign_payload(body: Body, secret: str) -> str:
    """The ``X-Service-Signature`` value for ``body`` (for tests and local tools)."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), _bytes(body), hashlib.sha256).hexdigest()


def verify_signature(body: Body, header: Optional[str], secret: Secret) -> bool:
    """True when ``header`` (``X-Service-Signature``) signs exactly these bytes with ``secret``, or
    with one of several secrets (old and new while a rotation settles). Constant-time."""
    if not isinstance(header, str):
        return False
    match = _SERVICE_SIGNATURE.match(header.strip())
    if not match:
        return False
    given = bytes.fromhex(match.group(1))
    valid = False
    # Every secret is checked (no early exit): timing does not tell which one matched.
    for candidate in _secrets(secret):
        expected = hmac.new(candidate.encode("utf-8"), _bytes(body), hashlib.sha256).digest()
        if hmac.compare_digest(expected, given):
            valid = True
    return valid


def sign_standard(body: Body, secret: str, msg_id: str, timestamp: int) -> str:
    """The Standard Webhooks ``webhook-signature`` value ``v1,<base64>`` (for tests and tools)."""
    key = _standard_key(secret)
    if not key:
        raise ValueError("The webhook secret holds no key (expected whsec_<base64>).")
    mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode("utf-8") + _bytes(body), hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode("ascii")


def _header(headers: Mapping[str, Any], name: str) -> Optional[str]:
    for key, value in headers.items():
        if key.lower() == name:
            return value if isinstance(value, str) else None
    return None


def verify_standard_webhook(
    body: Body,
    headers: Mapping[str, Any],
    secret: Secret,
    *,
    tolerance_seconds: int = DEFAULT_TOLERANCE_SECONDS,
    now: Callable[[], float] = time.time,
) -> Optional[str]:
    """Checks the Standard Webhooks headers: the timestamp within ``tolerance_seconds`` of ``now()``
    (a replayed old delivery is refused) and one ``v1`` signature made with one of ``secret``.
    Returns None when valid, else the reason: ``missing_headers``, ``invalid_timestamp``,
    ``timestamp_out_of_tolerance`` or ``invalid_signature``. Header names in any case."""
    msg_id = _header(headers, "webhook-id")
    timestamp = _header(headers, "webhook-timestamp")
    signatures = _header(headers, "webhook-signature")
    if not msg_id or not timestamp or not signatures:
        return "missing_headers"
    if not _TIMESTAMP.match(timestamp):
        return "invalid_timestamp"
    seconds = int(timestamp)
    if abs(int(now()) - seconds) > tolerance_seconds:
        return "timestamp_out_of_tolerance"
    given = [_base64(part[3:]) for part in signatures.split(" ") if part.startswith("v1,")]
    signed = f"{msg_id}.{seconds}.".encode("utf-8") + _bytes(body)
    valid = False
    for candidate in _secrets(secret):
        key = _standard_key(candidate)
        if not key:
            continue
        expected = hmac.new(key, signed, hashlib.sha256).digest()
        for sig in given:
            if hmac.compare_digest(expected, sig):
                valid = True
    return None if valid else "invalid_signature"


def verify_webhook(
    body: Body,
    headers: Mapping[str, Any],
    secret: Secret,
    *,
    tolerance_seconds: int = DEFAULT_TOLERANCE_SECONDS,
    allow_unsigned_timestamp: bool = False,
    now: Callable[[], float] = time.time,
) -> Dict[str, Any]:
    """Verifies a delivery and returns its event (``id``, ``event``, ``timestamp``, ``bot_id``,
    ``data``); raises :class:`WebhookVerificationError` otherwise. The rules of the SDKs'
    middleware: the Standard Webhooks headers are required (unless ``allow_unsigned_timestamp``)
    and checked; ``X-Service-Signature`` is checked whenever present. ``headers`` may be any
    mapping (a dict, ``http.server``'s message, a framework's headers), names in any case.
    Deduplicate on the event's ``id``: it is the same on every redelivery."""
    has_standard = _header(headers, "webhook-signature") is not None
    if has_standard:
        failure = verify_standard_webhook(body, headers, secret, tolerance_seconds=tolerance_seconds, now=now)
        if failure:
            raise WebhookVerificationError(failure)
    elif not allow_unsigned_timestamp:
        raise WebhookVerificationError("missing_headers")
    service = _header(headers, "x-service-signature")
    if (service is not None or not has_standard) and not verify_signature(body, service, secret):
        raise WebhookVerificationError("invalid_signature")
    try:
        event = json.loads(_bytes(body).decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise WebhookVerificationError("invalid_json") from None
    if not isinstance(event, dict) or not isinstance(event.get("id"), str):
        raise WebhookVerificationError("invalid_json")
    return event
