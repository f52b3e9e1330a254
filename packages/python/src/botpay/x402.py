"""Paying HTTP 402 ("x402") resources from the bot's partner wallet.

The bot never holds the wallet's key: it hands the 402 answer's payment requirements to the
service, which checks the owner's guardrails and signs (or holds the payment for the owner), then
repeats the request with the ``PAYMENT-SIGNATURE`` header the service returned.
"""

from __future__ import annotations

import base64
import binascii
import json
import urllib.error
import urllib.request
from typing import Any, Dict, Mapping, NamedTuple, Optional

from .client import BotPayClient
from .errors import UNEXPECTED_RESPONSE, BotPayError

__all__ = ["X402Response", "read_payment_required", "fetch_with_x402"]


class X402Response(NamedTuple):
    """The resource's final answer, and the payment that bought it (None when no 402 came)."""

    status: int
    headers: Dict[str, str]
    body: bytes
    payment: Optional[Dict[str, Any]]

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))


def read_payment_required(status: int, headers: Mapping[str, str], body: bytes) -> Dict[str, Any]:
    """The payment requirements of a 402 answer: the ``PAYMENT-REQUIRED`` header (x402 v2, base64
    JSON; a trailing carriage return or spaces are fine), else the JSON body (v1)."""
    header = next((v for k, v in headers.items() if k.lower() == "payment-required"), None)
    try:
        parsed = json.loads(base64.b64decode(header.strip()).decode("utf-8")) if header else json.loads(body)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise BotPayError(status, UNEXPECTED_RESPONSE, "The 402 answer carries no readable payment requirements.") from None
    accepts = parsed.get("accepts") if isinstance(parsed, dict) else None
    if not isinstance(accepts, list) or not accepts:
        raise BotPayError(status, UNEXPECTED_RESPONSE, "The 402 answer lists no payment requirements (accepts).")
    return parsed


def _send(url: str, method: str, headers: Mapping[str, str], data: Optional[bytes], timeout: float):
    request = urllib.request.Request(url, data=data, headers=dict(headers), method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as answer:
        return answer.code, {k.lower(): v for k, v in answer.headers.items()}, answer.read()


def fetch_with_x402(
    client: BotPayClient,
    url: str,
    *,
    method: str = "GET",
    headers: Optional[Mapping[str, str]] = None,
    data: Optional[bytes] = None,
    wait_for_approval: bool = True,
    max_wait: Optional[float] = None,
    timeout: float = 30.0,
) -> X402Response:
    """Requests ``url``; when it answers 402, asks the service to pay (its guardrails, possibly the
    owner's approval) and repeats the request once with ``PAYMENT-SIGNATURE``. Returns the final
    answer (check ``status``: a resource server can still refuse). A refusal by the service raises
    its :class:`BotPayError` (``rail_guardrail_violation``, ``destination_not_allowed``, ...); a
    held payment raises ``payment_held`` when ``wait_for_approval`` is False."""
    sent = dict(headers or {})
    status, answer_headers, body = _send(url, method, sent, data, timeout)
    if status != 402:
        return X402Response(status, answer_headers, body, None)
    required = read_payment_required(status, answer_headers, body)
    description = (required.get("resource") or {}).get("description") if isinstance(required.get("resource"), dict) else None
    payment = client.pay_x402(url, required["accepts"], description=description)
    if not payment.get("approved"):
        if not wait_for_approval:
            raise BotPayError(
                202,
                "payment_held",
                f"The payment {payment.get('payment_id')} is held for the owner's approval until {payment.get('expires_at')}.",
            )
        payment = client.wait_for_x402_payment(str(payment["payment_id"]), max_wait=max_wait)
        if payment.get("status") != "approved" or not payment.get("payment_header"):
            code = "payment_denied" if payment.get("status") == "denied" else "payment_expired"
            raise BotPayError(403, code, str(payment.get("message") or code))
    sent["PAYMENT-SIGNATURE"] = str(payment["payment_header"])
    status, answer_headers, body = _send(url, method, sent, data, timeout)
    return X402Response(status, answer_headers, body, payment)
