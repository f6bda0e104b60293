"""Events coming in: the outbox, the relay's claim, subjects and their facts, products, API keys
and idempotency records of the events API."""
