"""Python client of the Bot Payment Service bot API (standard library only).

>>> from botpay import BotPayClient, BotPayError, verify_webhook
"""

from .client import CLIENT_VERSION, FAST_PHASE_SECONDS, FAST_POLL_SECONDS, SLOW_POLL_SECONDS, BotPayClient
from .errors import BotPayError
from .webhooks import (
    DEFAULT_TOLERANCE_SECONDS,
    WebhookVerificationError,
    sign_payload,
    sign_standard,
    verify_signature,
    verify_standard_webhook,
    verify_webhook,
)
from .x402 import X402Response, fetch_with_x402, read_payment_required

__version__ = CLIENT_VERSION

__all__ = [
    "BotPayClient",
    "BotPayError",
    "CLIENT_VERSION",
    "DEFAULT_TOLERANCE_SECONDS",
    "FAST_PHASE_SECONDS",
    "FAST_POLL_SECONDS",
    "SLOW_POLL_SECONDS",
    "WebhookVerificationError",
    "X402Response",
    "fetch_with_x402",
    "read_payment_required",
    "sign_payload",
    "sign_standard",
    "verify_signature",
    "verify_standard_webhook",
    "verify_webhook",
]
