"""Adapters to providers: SES (the raw MIME message, the client) and the shared send rate."""
