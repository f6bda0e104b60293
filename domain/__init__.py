"""Tocsin's pure core: decisions over values, no I/O and no imports from the other layers."""
