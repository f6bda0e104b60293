"""Notices claimed in the ledger: the licence scan, rule notices, their recipients, the fan-out
into inbox rows and deliveries, and the obligations list."""
