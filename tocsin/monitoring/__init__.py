"""Monitoring: metrics, the liveness verdict and ops alerts."""
