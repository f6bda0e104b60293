"""Delivery decisions: the delivery state machine, quiet hours, preferences, preparation
queues, unsubscribe tokens and SNS messages as they reach the portal."""
