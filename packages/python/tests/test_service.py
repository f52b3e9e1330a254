"""The client against a real service: registration, claim, status, checkout with idempotency,
polling for the owner's decision, refusals with their codes, and real webhook deliveries."""

from __future__ import annotations

import json
import os
import threading
import time
import unittest
import uuid

from botpay import BotPayClient, BotPayError, verify_webhook
from botpay.webhooks import WebhookVerificationError

from .support import BASE_URL, LocalServer, needs_service, owner

CARD_KEY = os.environ.get("BOTPAY_CARD_BOT_KEY", "")
CARD_PROFILE = int(os.environ.get("BOTPAY_CARD_PROFILE", "0") or 0)
CARD_DIGITS = os.environ.get("BOTPAY_CARD_DIGITS", "")


def purchase(amount_cents: int, **extra: object) -> dict:
    return {
        "profile_index": CARD_PROFILE,
        "merchant_name": "Example Store",
        "merchant_url": "https://store.example.com/p/1",
        "item_name": "USB cable",
        "amount_cents": amount_cents,
        **extra,
    }


@needs_service
class RegisterAndStatus(unittest.TestCase):
    def test_register_is_pending_until_claimed_then_active(self) -> None:
        service = BotPayClient(BASE_URL)
        reg = service.register(bot_name=f"py-{uuid.uuid4().hex[:8]}", owner_email="python-owner@example.com")
        self.assertRegex(reg["api_key"], r"^svc_live_[0-9a-f]{48}$")
        self.assertTrue(reg["webhook_secret"].startswith("whsec_"))
        bot = service.with_api_key(reg["api_key"])
        self.assertEqual(bot.status()["status"], "pending")
        code, claimed = owner("POST", "/api/v1/owner/claims", {"claim_token": reg["claim_token"]})
        self.assertEqual(code, 200, claimed)
        self.assertEqual(bot.status()["status"], "active")
        code, _ = owner("POST", f"/api/v1/owner/bots/{reg['bot_id']}/wallet/fund", {"amount_cents": 1234})
        self.assertEqual(code, 200)
        self.assertEqual(bot.wallet_check()["balance_usd"], 12.34)

    def test_wrong_key_and_bad_input_raise_the_spec_codes(self) -> None:
        stranger = BotPayClient(BASE_URL, "svc_live_" + "0" * 48)
        with self.assertRaises(BotPayError) as refused:
            stranger.status()
        self.assertEqual((refused.exception.status, refused.exception.code), (401, "Authentication required"))
        with self.assertRaises(BotPayError) as invalid:
            BotPayClient(BASE_URL).register(bot_name="", owner_email="not-an-address")
        self.assertEqual((invalid.exception.status, invalid.exception.code), (400, "validation_error"))
        with self.assertRaises(ValueError):
            BotPayClient(BASE_URL).status()  # no key
        with self.assertRaises(ValueError):
            BotPayClient("ftp://example.com")

    def test_network_errors_are_retried_then_raised_with_status_0(self) -> None:
        slept: list = []
        # Port 9 (discard) on loopback: nothing listens there, the connection is refused.
        client = BotPayClient("http://127.0.0.1:9", "svc_live_" + "0" * 48, sleep=slept.append, rand=lambda: 0.0)
        with self.assertRaises(BotPayError) as failed:
            client.status()
        self.assertEqual((failed.exception.status, failed.exception.code), (0, "network_error"))
        self.assertEqual(slept, [0.15, 0.3, 0.6])  # 4 attempts, exponential backoff
        slept.clear()
        with self.assertRaises(BotPayError):
            client.register(bot_name="x", owner_email="x@example.com")
        self.assertEqual(slept, [])  # a registration is never repeated after a network error


@unittest.skipUnless(CARD_KEY, "BOTPAY_CARD_BOT_KEY not set (npm test sets it)")
@needs_service
class Checkout(unittest.TestCase):
    def test_idempotent_checkout_then_the_owners_approval_by_polling(self) -> None:
        bot = BotPayClient(BASE_URL, CARD_KEY)
        key = f"py-{uuid.uuid4()}"
        first = bot.checkout(purchase(400), idempotency_key=key)
        self.assertEqual((first["approved"], first["status"]), (False, "pending_confirmation"))
        again = bot.checkout(purchase(400), idempotency_key=key)
        self.assertEqual(again["confirmation_id"], first["confirmation_id"])
        code, approvals = owner("GET", "/api/v1/owner/approvals")
        self.assertEqual(code, 200)
        held = [a for a in approvals["approvals"] if a["confirmation_id"] == first["confirmation_id"]]
        self.assertEqual(len(held), 1)  # retried, bought once
        self.assertEqual(bot.checkout_status(first["confirmation_id"])["status"], "pending")

        def approve() -> None:
            time.sleep(0.5)
            owner("POST", f"/api/v1/owner/approvals/{first['confirmation_id']}/approve")

        polls: list = []
        threading.Thread(target=approve).start()
        decided = bot.wait_for_decision(
            first["confirmation_id"], max_wait=30, fast_poll=0.2, on_poll=lambda s: polls.append(s["status"])
        )
        self.assertEqual(decided["status"], "approved")
        self.assertEqual(decided["missing_digits"], CARD_DIGITS)
        self.assertEqual(polls[0], "pending")

    def test_wait_gives_up_with_timeout(self) -> None:
        bot = BotPayClient(BASE_URL, CARD_KEY)
        held = bot.checkout(purchase(300))
        with self.assertRaises(BotPayError) as gave_up:
            bot.wait_for_decision(held["confirmation_id"], max_wait=0.5, fast_poll=0.2)
        self.assertEqual(gave_up.exception.code, "timeout")
        owner("POST", f"/api/v1/owner/approvals/{held['confirmation_id']}/deny")
        self.assertEqual(bot.wait_for_decision(held["confirmation_id"], fast_poll=0.2)["status"], "denied")

    def test_refusals_carry_the_spec_codes(self) -> None:
        bot = BotPayClient(BASE_URL, CARD_KEY)
        with self.assertRaises(BotPayError) as broke:
            bot.checkout(purchase(500_000))
        self.assertIn(broke.exception.status, (402, 403))
        self.assertIn(broke.exception.code, ("insufficient_funds", "allowance_exceeded", "card_guardrail_violation"))
        with self.assertRaises(BotPayError) as bad:
            bot.checkout({**purchase(100), "profile_index": 9})
        self.assertEqual(bad.exception.code, "invalid_profile")
        with self.assertRaises(BotPayError) as unknown:
            bot.checkout(purchase(100, currency="EUR"))
        self.assertEqual(unknown.exception.code, "validation_error")
        with self.assertRaises(BotPayError) as missing:
            bot.checkout_status("chk_aaaaaaaaaaaaaaaa")
        self.assertEqual((missing.exception.status, missing.exception.code), (404, "not_found"))
        # The same key for a different purchase is a conflict, never a second purchase.
        key = f"py-{uuid.uuid4()}"
        bot.checkout(purchase(100), idempotency_key=key)
        with self.assertRaises(BotPayError) as conflict:
            bot.checkout(purchase(200), idempotency_key=key)
        self.assertEqual((conflict.exception.status, conflict.exception.code), (409, "idempotency_conflict"))


@needs_service
class RealDeliveries(unittest.TestCase):
    """The service's webhook worker delivers to a receiver here, which verifies with this package."""

    def test_deliveries_verify_and_tampered_copies_do_not(self) -> None:
        received: list = []
        secret_box: dict = {}

        def receive(handler, body: bytes):
            try:
                event = verify_webhook(body, handler.headers, secret_box["secret"])
            except WebhookVerificationError as refused:
                return 401, {"Content-Type": "application/json"}, json.dumps({"error": refused.reason}).encode()
            received.append((event, dict(handler.headers.items()), body))
            return 200, {"Content-Type": "application/json"}, b'{"received":true}'

        receiver = LocalServer(receive)
        try:
            service = BotPayClient(BASE_URL)
            reg = service.register(
                bot_name=f"py-hooks-{uuid.uuid4().hex[:8]}",
                owner_email="python-owner@example.com",
                callback_url=f"{receiver.url}/hook",
            )
            secret_box["secret"] = reg["webhook_secret"]
            self.assertEqual(owner("POST", "/api/v1/owner/claims", {"claim_token": reg["claim_token"]})[0], 200)
            self.assertEqual(
                owner("POST", f"/api/v1/owner/bots/{reg['bot_id']}/wallet/fund", {"amount_cents": 500})[0], 200
            )
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not any(e["event"] == "wallet.funded" for e, _, _ in received):
                time.sleep(0.1)
            events = [e["event"] for e, _, _ in received]
            self.assertIn("wallet.funded", events)
            event, headers, body = next(r for r in received if r[0]["event"] == "wallet.funded")
            self.assertEqual(event["bot_id"], reg["bot_id"])
            self.assertEqual(headers.get("webhook-id") or headers.get("Webhook-Id"), event["id"])
            with self.assertRaises(WebhookVerificationError):
                verify_webhook(body.replace(b'"data"', b'"dato"'), headers, reg["webhook_secret"])
            with self.assertRaises(WebhookVerificationError):
                verify_webhook(body, headers, "whsec_" + "00" * 24)
            with self.assertRaises(WebhookVerificationError) as replayed:
                verify_webhook(body, headers, reg["webhook_secret"], now=lambda: time.time() + 600)
            self.assertEqual(replayed.exception.reason, "timestamp_out_of_tolerance")
            # Delivered events left the queue the bot would otherwise poll.
            bot = service.with_api_key(reg["api_key"])
            queued = [m["id"] for m in bot.messages(limit=200)["messages"]]
            self.assertNotIn(event["id"], queued)
        finally:
            receiver.close()
