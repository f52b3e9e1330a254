"""The bot API client: register, status, checkout with an Idempotency-Key, polling, x402 payments.

Only the standard library (urllib, json, uuid). Every call retries safely: reads, acknowledgements
and calls carrying an Idempotency-Key are retried on network errors, timeouts, 429 and
502/503/504 with exponential backoff and jitter, never sooner than the service's
``retry_after_seconds``; registration only on 429 (after a network error a second registration
could not be told from the first).
"""

from __future__ import annotations

import json
import random
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from .errors import NETWORK_ERROR, TIMEOUT, UNEXPECTED_RESPONSE, BotPayError

__all__ = ["BotPayClient", "CLIENT_VERSION", "FAST_POLL_SECONDS", "SLOW_POLL_SECONDS", "FAST_PHASE_SECONDS"]

CLIENT_VERSION = "0.1.0"

#: The polling schedule of the API reference: every 5 s for the first minute, then every 15 s.
FAST_POLL_SECONDS = 5.0
SLOW_POLL_SECONDS = 15.0
FAST_PHASE_SECONDS = 60.0

_FINAL = {"approved", "denied", "expired"}
_RETRYABLE_STATUS = {502, 503, 504}

Json = Dict[str, Any]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """The bot API never redirects: a redirect is refused rather than followed with the key."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[override]
        raise urllib.error.HTTPError(req.full_url, code, f"redirect to {newurl} refused", headers, fp)


_OPENER = urllib.request.build_opener(_NoRedirect)


class BotPayClient:
    """A client of one Bot Payment Service, optionally as one bot (its API key).

    >>> service = BotPayClient("http://localhost:8080")
    >>> reg = service.register(bot_name="shopper", owner_email="me@example.com")  # doctest: +SKIP
    >>> bot = service.with_api_key(reg["api_key"])  # doctest: +SKIP
    """

    def __init__(
        self,
        base_url: str,
        api_key: Optional[str] = None,
        *,
        timeout: float = 30.0,
        max_attempts: int = 4,
        base_delay: float = 0.3,
        max_delay: float = 20.0,
        max_retry_after: float = 60.0,
        user_agent: Optional[str] = None,
        sleep: Callable[[float], None] = time.sleep,
        now: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
    ) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError("base_url must be an http(s) URL, e.g. https://pay.example.com")
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.max_retry_after = max_retry_after
        self.user_agent = user_agent or f"botpay-python/{CLIENT_VERSION}"
        self.sleep = sleep
        self.now = now
        self.rand = rand

    def with_api_key(self, api_key: str) -> "BotPayClient":
        """A client with the same settings that authenticates as the bot with ``api_key``."""
        other = BotPayClient.__new__(BotPayClient)
        other.__dict__.update(self.__dict__)
        other.api_key = api_key
        return other

    # -- the bot API -------------------------------------------------------------------------

    def register(self, **body: Any) -> Json:
        """POST /api/v1/bots/register (no key). Save ``api_key`` and ``webhook_secret`` at once:
        they are shown only here. Hand ``owner_verification_url`` (or ``claim_token``) to the owner."""
        return self._request("POST", "/api/v1/bots/register", body=body, auth=False, idempotent=False)

    def status(self) -> Json:
        """GET /api/v1/bot/status: pending until the owner claims the bot, then active."""
        return self._request("GET", "/api/v1/bot/status")

    def wallet_check(self) -> Json:
        """GET /api/v1/bot/wallet/check: balance and the limits left."""
        return self._request("GET", "/api/v1/bot/wallet/check")

    def checkout(self, request: Mapping[str, Any], *, idempotency_key: Optional[str] = None) -> Json:
        """POST /api/v1/bot/merchant/checkout. Approved (``approved: True`` with the card details) or
        held for the owner (``approved: False``, then :meth:`wait_for_decision`); a refusal raises
        :class:`BotPayError`. Every attempt carries the same Idempotency-Key (a fresh UUID unless
        given): pass your own, stored with your order, to stay safe across restarts."""
        key = idempotency_key or str(uuid.uuid4())
        return self._request(
            "POST", "/api/v1/bot/merchant/checkout", body=dict(request), headers={"Idempotency-Key": key}
        )

    def checkout_status(self, confirmation_id: str) -> Json:
        """GET /api/v1/bot/merchant/checkout/status: pending, approved, denied or expired."""
        return self._request(
            "GET", "/api/v1/bot/merchant/checkout/status", query={"confirmation_id": confirmation_id}
        )

    def wait_for_decision(
        self,
        confirmation_id: str,
        *,
        max_wait: Optional[float] = None,
        on_poll: Optional[Callable[[Json], None]] = None,
        fast_poll: float = FAST_POLL_SECONDS,
        slow_poll: float = SLOW_POLL_SECONDS,
    ) -> Json:
        """Polls :meth:`checkout_status` (every 5 s for a minute, then every 15 s) until the owner
        decides; returns the final status. A blip that outlasted the call's own retries does not
        end the wait. After ``max_wait`` seconds raises :class:`BotPayError` ``timeout``."""
        return self._poll(self.checkout_status, confirmation_id, max_wait, on_poll, fast_poll, slow_poll)

    def next_task(self) -> Json:
        """POST /api/v1/bot/tasks/next: the next purchase task, leased for an hour, or none."""
        return self._request("POST", "/api/v1/bot/tasks/next")

    def messages(self, limit: Optional[int] = None) -> Json:
        """GET /api/v1/bot/messages: events not delivered by webhook nor acknowledged."""
        return self._request("GET", "/api/v1/bot/messages", query={"limit": limit})

    def ack_messages(self, event_ids: Sequence[str]) -> Json:
        """POST /api/v1/bot/messages/ack."""
        return self._request("POST", "/api/v1/bot/messages/ack", body={"event_ids": list(event_ids)})

    def request_topup(self, amount_cents: int, reason: str) -> Json:
        """POST /api/v1/bot/wallet/topup-requests: asks the owner for funds."""
        return self._request(
            "POST", "/api/v1/bot/wallet/topup-requests", body={"amount_cents": amount_cents, "reason": reason}
        )

    def topup_requests(self) -> Json:
        """GET /api/v1/bot/wallet/topup-requests."""
        return self._request("GET", "/api/v1/bot/wallet/topup-requests")

    def pay_x402(
        self,
        resource_url: str,
        payment_requirements: Union[Mapping[str, Any], Sequence[Mapping[str, Any]]],
        *,
        idempotency_key: Optional[str] = None,
        description: Optional[str] = None,
    ) -> Json:
        """POST /api/v1/bot/x402/pay: the partner wallet pays an HTTP 402 resource. Send the 402
        answer's ``accepts`` list (or one entry). Approved: retry the resource with
        ``payment_header`` as its PAYMENT-SIGNATURE header; held: :meth:`wait_for_x402_payment`."""
        body: Json = {"resource_url": resource_url, "payment_requirements": _plain(payment_requirements)}
        if description:
            body["description"] = description
        key = idempotency_key or str(uuid.uuid4())
        return self._request("POST", "/api/v1/bot/x402/pay", body=body, headers={"Idempotency-Key": key})

    def x402_payment(self, payment_id: str) -> Json:
        """GET /api/v1/bot/x402/payments/{payment_id}."""
        return self._request("GET", f"/api/v1/bot/x402/payments/{urllib.parse.quote(payment_id, safe='')}")

    def wait_for_x402_payment(self, payment_id: str, *, max_wait: Optional[float] = None) -> Json:
        """Polls :meth:`x402_payment` until the owner decides a held payment."""
        return self._poll(self.x402_payment, payment_id, max_wait, None, FAST_POLL_SECONDS, SLOW_POLL_SECONDS)

    # -- transport -----------------------------------------------------------------------------

    def _poll(
        self,
        look: Callable[[str], Json],
        ident: str,
        max_wait: Optional[float],
        on_poll: Optional[Callable[[Json], None]],
        fast_poll: float,
        slow_poll: float,
    ) -> Json:
        started = self.now()
        while True:
            try:
                status = look(ident)
                if on_poll:
                    on_poll(status)
                if status.get("status") in _FINAL:
                    return status
            except BotPayError as error:
                if not error.transient:
                    raise
            elapsed = self.now() - started
            if max_wait is not None and elapsed >= max_wait:
                raise BotPayError(0, TIMEOUT, f"No decision on {ident} within {max_wait} s.")
            interval = fast_poll if elapsed < FAST_PHASE_SECONDS else slow_poll
            left = interval if max_wait is None else max_wait - elapsed
            self.sleep(max(0.0, min(interval, left)))

    def _request(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, Any]] = None,
        body: Optional[Mapping[str, Any]] = None,
        headers: Optional[Mapping[str, str]] = None,
        auth: bool = True,
        idempotent: bool = True,
    ) -> Json:
        url = self.base_url + path
        params = {k: str(v) for k, v in (query or {}).items() if v is not None}
        if params:
            url += "?" + urllib.parse.urlencode(params)
        sent = {"Accept": "application/json", "User-Agent": self.user_agent, **(headers or {})}
        if auth:
            if not self.api_key:
                raise ValueError("This call needs the bot's API key: BotPayClient(base_url, api_key).")
            sent["Authorization"] = f"Bearer {self.api_key}"
        data = None
        # No body, no Content-Type: the service refuses an empty body declared as JSON.
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode("utf-8")
            sent["Content-Type"] = "application/json"
        attempt = 1
        while True:
            try:
                return self._attempt(method, url, sent, data)
            except BotPayError as error:
                wait = self._retry_delay(error, idempotent, attempt)
                if wait is None:
                    raise
            self.sleep(wait)
            attempt += 1

    def _attempt(self, method: str, url: str, headers: Mapping[str, str], data: Optional[bytes]) -> Json:
        request = urllib.request.Request(url, data=data, headers=dict(headers), method=method)
        origin = urllib.parse.urlsplit(url)
        where = f"{origin.scheme}://{origin.netloc}"
        try:
            with _OPENER.open(request, timeout=self.timeout) as response:
                return _success(response.status, response.read())
        except urllib.error.HTTPError as answer:
            raise _error_from(answer.code, answer.headers, answer.read()) from None
        except (socket.timeout, TimeoutError) as cause:
            raise BotPayError(0, TIMEOUT, f"No answer from {where} in time.") from cause
        except (urllib.error.URLError, ConnectionError, OSError) as cause:
            reason = getattr(cause, "reason", cause)
            if isinstance(reason, (socket.timeout, TimeoutError)):
                raise BotPayError(0, TIMEOUT, f"No answer from {where} in time.") from cause
            raise BotPayError(0, NETWORK_ERROR, f"Could not reach {where}: {reason}") from cause

    def _retry_delay(self, error: BotPayError, idempotent: bool, attempt: int) -> Optional[float]:
        if attempt >= self.max_attempts:
            return None
        retryable = error.status == 429 or (idempotent and (error.status == 0 or error.status in _RETRYABLE_STATUS))
        if not retryable:
            return None
        after = error.retry_after_seconds
        if after is not None and after > self.max_retry_after:
            return None
        step = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        if after is None:
            return step / 2 + self.rand() * step / 2
        return after + self.rand() * min(1.0, step)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _success(status: int, raw: bytes) -> Json:
    if status == 204 or not raw:
        return {}
    try:
        parsed = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise BotPayError(status, UNEXPECTED_RESPONSE, "The answer is not JSON.") from None
    if not isinstance(parsed, dict):
        raise BotPayError(status, UNEXPECTED_RESPONSE, "The answer is not a JSON object.")
    return parsed


def _error_from(status: int, headers: Any, raw: bytes) -> BotPayError:
    request_id = headers.get("x-request-id") if headers is not None else None
    header_after = headers.get("retry-after") if headers is not None else None
    try:
        body = json.loads(raw.decode("utf-8")) if raw else None
    except (UnicodeDecodeError, ValueError):
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("error"), str):
        retry = _number(header_after)
        return BotPayError(
            status,
            UNEXPECTED_RESPONSE,
            f"HTTP {status} without the service's error body.",
            retry_after_seconds=retry,
            request_id=request_id,
        )
    details = {k: v for k, v in body.items() if k not in ("error", "message")}
    after = _number(body.get("retry_after_seconds"))
    if after is None:
        after = _number(header_after)
    return BotPayError(
        status,
        body["error"],
        str(body.get("message") or body["error"]),
        details=details,
        retry_after_seconds=after,
        request_id=request_id,
    )


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None
