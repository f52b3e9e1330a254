"""The error a call raises: the service's error envelope, or the client's own transport codes."""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

#: Codes for failures with no answer from the service (HTTP status 0).
NETWORK_ERROR = "network_error"
TIMEOUT = "timeout"
#: An answer that is not the service's JSON (for example a proxy's HTML page).
UNEXPECTED_RESPONSE = "unexpected_response"


class BotPayError(Exception):
    """A refusal of the service (``code`` is the ``error`` field of its body) or a transport failure.

    Match on ``code`` (``insufficient_funds``, ``wallet_frozen``, ``rate_limited``,
    ``Authentication required``, ...), never on the message. ``details`` holds every other field
    of the body (``field``, ``limit_usd``, ``remaining_usd``, ...).
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        details: Optional[Mapping[str, Any]] = None,
        retry_after_seconds: Optional[float] = None,
        request_id: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details: Dict[str, Any] = dict(details or {})
        self.retry_after_seconds = retry_after_seconds
        self.request_id = request_id

    @property
    def transient(self) -> bool:
        """True for failures worth trying again later: no answer, 429, 502, 503, 504."""
        return self.status in (0, 429, 502, 503, 504)

    @property
    def field(self) -> Optional[str]:
        value = self.details.get("field")
        return value if isinstance(value, str) else None

    @property
    def limit_usd(self) -> Optional[float]:
        value = self.details.get("limit_usd")
        return float(value) if isinstance(value, (int, float)) else None

    @property
    def remaining_usd(self) -> Optional[float]:
        value = self.details.get("remaining_usd")
        return float(value) if isinstance(value, (int, float)) else None

    def __repr__(self) -> str:
        return f"BotPayError(status={self.status}, code={self.code!r}, message={self.message!r})"
