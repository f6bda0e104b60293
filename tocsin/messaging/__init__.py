"""Messaging: the Dramatiq brokers (Redis, RabbitMQ), queue readers, consumer presence, the
sweeper's marker, priorities and the after-commit hand-offs to queues."""
