"""Webhook signatures: round trips, every refusal, and the TypeScript SDK's signatures verified."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import unittest

from botpay import (
    WebhookVerificationError,
    sign_payload,
    sign_standard,
    verify_signature,
    verify_standard_webhook,
    verify_webhook,
)
from botpay.webhooks import _base64

SECRET = "whsec_" + "3c" * 24
BODY = json.dumps({"id": "evt_1", "event": "wallet.funded", "timestamp": "", "bot_id": "bot_1", "data": {}})
NOW = 1_700_000_000


def signed(body: str = BODY, secret: str = SECRET, at: int = NOW, msg_id: str = "evt_1") -> dict:
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(at),
        "webhook-signature": sign_standard(body, secret, msg_id, at),
        "x-service-signature": sign_payload(body, secret),
    }


class ServiceSignature(unittest.TestCase):
    def test_round_trip_and_tampering(self) -> None:
        header = sign_payload(BODY, SECRET)
        self.assertTrue(header.startswith("sha256=") and len(header) == 71)
        self.assertTrue(verify_signature(BODY, header, SECRET))
        self.assertTrue(verify_signature(BODY.encode(), header.upper().replace("SHA256=", "sha256="), SECRET))
        self.assertFalse(verify_signature(BODY + " ", header, SECRET))
        self.assertFalse(verify_signature(BODY, header, SECRET + "x"))
        self.assertTrue(verify_signature(BODY, header, ["whsec_old", SECRET]))
        self.assertFalse(verify_signature(BODY, header, []))

    def test_malformed_headers(self) -> None:
        good = sign_payload(BODY, SECRET)
        for header in [None, "", "sha256=", good[7:], "sha1=" + good[7:], good + "0", good[:-1] + "g"]:
            self.assertFalse(verify_signature(BODY, header, SECRET), header)


class StandardWebhooks(unittest.TestCase):
    def test_valid_tampered_and_replayed(self) -> None:
        headers = signed()
        self.assertIsNone(verify_standard_webhook(BODY, headers, SECRET, now=lambda: NOW + 10))
        upper = {k.upper(): v for k, v in headers.items()}
        self.assertIsNone(verify_standard_webhook(BODY, upper, SECRET, now=lambda: NOW))
        self.assertEqual(verify_standard_webhook(BODY + " ", headers, SECRET, now=lambda: NOW), "invalid_signature")
        other_id = {**headers, "webhook-id": "evt_2"}
        self.assertEqual(verify_standard_webhook(BODY, other_id, SECRET, now=lambda: NOW), "invalid_signature")
        self.assertEqual(
            verify_standard_webhook(BODY, headers, SECRET, now=lambda: NOW + 301), "timestamp_out_of_tolerance"
        )
        self.assertEqual(
            verify_standard_webhook(BODY, headers, SECRET, now=lambda: NOW - 600, tolerance_seconds=700), None
        )
        self.assertEqual(verify_standard_webhook(BODY, {}, SECRET), "missing_headers")
        bad_time = {**headers, "webhook-timestamp": "12e3"}
        self.assertEqual(verify_standard_webhook(BODY, bad_time, SECRET, now=lambda: NOW), "invalid_timestamp")

    def test_rotation_sends_one_signature_per_secret(self) -> None:
        new = "whsec_" + "4f" * 24
        both = sign_standard(BODY, new, "evt_1", NOW) + " " + sign_standard(BODY, SECRET, "evt_1", NOW)
        headers = {"webhook-id": "evt_1", "webhook-timestamp": str(NOW), "webhook-signature": both}
        self.assertIsNone(verify_standard_webhook(BODY, headers, SECRET, now=lambda: NOW))
        self.assertIsNone(verify_standard_webhook(BODY, headers, new, now=lambda: NOW))
        self.assertEqual(
            verify_standard_webhook(BODY, headers, "whsec_" + "00" * 24, now=lambda: NOW), "invalid_signature"
        )

    def test_a_secret_without_a_key_verifies_nothing(self) -> None:
        empty_keyed = "v1," + base64.b64encode(hmac.new(b"", f"evt_1.{NOW}.x".encode(), hashlib.sha256).digest()).decode()
        headers = {"webhook-id": "evt_1", "webhook-timestamp": str(NOW), "webhook-signature": empty_keyed}
        self.assertEqual(verify_standard_webhook("x", headers, ["whsec_", "whsec_*"], now=lambda: NOW), "invalid_signature")
        with self.assertRaises(ValueError):
            sign_standard("x", "whsec_", "evt_1", NOW)

    def test_base64_is_read_as_the_service_reads_it(self) -> None:
        # Node's Buffer: both alphabets, other characters skipped, "=" ends it, a lone char ignored.
        cases = {"other": "a2d85e", "ab=cd": "69", "a b\ncd": "69b71d", "ab-_": "69bfbf", "abc": "69b7", "a": ""}
        for text, hex_bytes in cases.items():
            self.assertEqual(_base64(text).hex(), hex_bytes, text)


class VerifyWebhook(unittest.TestCase):
    def test_rules_of_the_middleware(self) -> None:
        event = verify_webhook(BODY, signed(), SECRET, now=lambda: NOW)
        self.assertEqual(event["event"], "wallet.funded")
        only_service = {"x-service-signature": sign_payload(BODY, SECRET)}
        with self.assertRaises(WebhookVerificationError) as refused:
            verify_webhook(BODY, only_service, SECRET, now=lambda: NOW)
        self.assertEqual(refused.exception.reason, "missing_headers")
        self.assertEqual(verify_webhook(BODY, only_service, SECRET, allow_unsigned_timestamp=True)["id"], "evt_1")
        wrong_service = {**signed(), "x-service-signature": sign_payload("{}", SECRET)}
        with self.assertRaises(WebhookVerificationError) as refused:
            verify_webhook(BODY, wrong_service, SECRET, now=lambda: NOW)
        self.assertEqual(refused.exception.reason, "invalid_signature")
        with self.assertRaises(WebhookVerificationError) as refused:
            verify_webhook("hello", signed("hello"), SECRET, now=lambda: NOW)
        self.assertEqual(refused.exception.reason, "invalid_json")


FIXTURES = os.environ.get("BOTPAY_FIXTURES", "")


@unittest.skipUnless(FIXTURES, "BOTPAY_FIXTURES not set (npm test sets it)")
class AgainstTheTypeScriptSdk(unittest.TestCase):
    """Signatures made by @botpay/client (the service's own scheme) verify here, and ours match."""

    def test_same_signatures_both_ways(self) -> None:
        with open(FIXTURES, encoding="utf-8") as f:
            fx = json.load(f)
        headers = {
            "webhook-id": "evt_ts",
            "webhook-timestamp": str(fx["timestamp"]),
            "webhook-signature": fx["webhook_signature"],
            "x-service-signature": fx["x_service_signature"],
        }
        self.assertEqual(verify_webhook(fx["body"], headers, fx["secret"])["id"], "evt_ts")
        self.assertEqual(sign_payload(fx["body"], fx["secret"]), fx["x_service_signature"])
        self.assertEqual(sign_standard(fx["body"], fx["secret"], "evt_ts", fx["timestamp"]), fx["webhook_signature"])
        # A secret that is not canonical base64 is keyed as the service keys it.
        self.assertEqual(sign_standard(fx["body"], fx["other_secret"], "evt_ts", fx["timestamp"]), fx["other_webhook_signature"])
