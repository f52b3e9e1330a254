"""x402: a resource that answers 402 is paid through the service and fetched again.

The seller is a stand-in on 127.0.0.1 (the edge of the world here): it answers 402 with an x402 v2
PAYMENT-REQUIRED header and serves the resource to a request carrying a PAYMENT-SIGNATURE that
decodes to a signed payment for what it asked. The paying side — guardrails, signing with the
partner wallet's key, the ledger — is the real service."""

from __future__ import annotations

import base64
import json
import os
import unittest
import uuid

from botpay import BotPayClient, BotPayError, fetch_with_x402, read_payment_required

from .support import BASE_URL, LocalServer, needs_service

X402_KEY = os.environ.get("BOTPAY_X402_BOT_KEY", "")
CARD_KEY = os.environ.get("BOTPAY_CARD_BOT_KEY", "")
REQUIREMENT = json.loads(os.environ.get("BOTPAY_X402_REQUIREMENT", "{}") or "{}")


def seller():
    def answer(handler, _body: bytes):
        signature = handler.headers.get("PAYMENT-SIGNATURE")
        if signature:
            payment = json.loads(base64.b64decode(signature))
            accepted = payment.get("accepted") or {}
            if accepted.get("payTo") == REQUIREMENT["payTo"] and payment.get("payload", {}).get("signature"):
                return 200, {"Content-Type": "application/json"}, b'{"report":"paid content"}'
            return 402, {}, b'{"error":"payment not accepted"}'
        required = {
            "x402Version": 2,
            "resource": {"url": handler.path, "description": "A paid report"},
            "accepts": [REQUIREMENT],
        }
        # A trailing carriage return, as some servers send: the client must not mind it.
        header = base64.b64encode(json.dumps(required).encode()).decode() + "\r"
        return 402, {"PAYMENT-REQUIRED": header.strip(), "Content-Type": "application/json"}, b"{}"

    return LocalServer(answer)


@unittest.skipUnless(X402_KEY and REQUIREMENT, "BOTPAY_X402_BOT_KEY not set (npm test sets it)")
@needs_service
class X402(unittest.TestCase):
    def test_fetch_pays_the_402_through_the_service_and_gets_the_resource(self) -> None:
        shop = seller()
        try:
            bot = BotPayClient(BASE_URL, X402_KEY)
            answer = fetch_with_x402(bot, f"{shop.url}/report")
            self.assertEqual(answer.status, 200, answer.body)
            self.assertEqual(answer.json(), {"report": "paid content"})
            self.assertTrue(answer.payment and answer.payment["approved"])
            self.assertEqual([r[1] for r in shop.requests], ["/report", "/report"])
            self.assertNotIn("PAYMENT-SIGNATURE", shop.requests[0][2])
            status = bot.x402_payment(answer.payment["payment_id"])
            self.assertEqual(status["status"], "approved")
        finally:
            shop.close()

    def test_pay_is_idempotent_by_key(self) -> None:
        bot = BotPayClient(BASE_URL, X402_KEY)
        key = f"py-{uuid.uuid4()}"
        first = bot.pay_x402("https://api.example.com/paid", [REQUIREMENT], idempotency_key=key)
        again = bot.pay_x402("https://api.example.com/paid", [REQUIREMENT], idempotency_key=key)
        self.assertEqual(first["payment_id"], again["payment_id"])
        self.assertEqual(first["payment_header"], again["payment_header"])

    def test_refusals_raise_their_codes(self) -> None:
        no_rail = BotPayClient(BASE_URL, CARD_KEY or X402_KEY)
        if CARD_KEY:
            with self.assertRaises(BotPayError) as refused:
                no_rail.pay_x402("https://api.example.com/paid", REQUIREMENT)
            self.assertEqual((refused.exception.status, refused.exception.code), (403, "rail_not_active"))
        bot = BotPayClient(BASE_URL, X402_KEY)
        with self.assertRaises(BotPayError) as invalid:
            bot.pay_x402("https://api.example.com/paid", {**REQUIREMENT, "amount": "10000.5"})
        self.assertEqual(invalid.exception.code, "validation_error")

    def test_reading_payment_requirements(self) -> None:
        encoded = base64.b64encode(json.dumps({"x402Version": 2, "accepts": [REQUIREMENT]}).encode()).decode()
        self.assertEqual(read_payment_required(402, {"Payment-Required": encoded + "\r\n"}, b"")["accepts"], [REQUIREMENT])
        self.assertEqual(read_payment_required(402, {}, json.dumps({"x402Version": 1, "accepts": [REQUIREMENT]}).encode())["x402Version"], 1)
        with self.assertRaises(BotPayError) as unreadable:
            read_payment_required(402, {}, b"<html>")
        self.assertEqual(unreadable.exception.code, "unexpected_response")
