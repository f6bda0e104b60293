"""Delivery of claimed notices: email deliveries and their states, reviews of held deliveries,
digests, the inbox, provider events, the sweeper's recovery and ops alerts."""
