"""Tocsin's application shell: settings, embedded services, processes and the CLI."""
