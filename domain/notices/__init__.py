"""Notices: the annual licence cadence and the states of a ledger claim."""
