"""Tocsin's process side, by layer: the core (settings, the clock, keys), the adapters
(messaging, providers), monitoring, the shell (CLI, supervisor, services, demos) and one
bootstrap per process kind (tocsin/boot)."""
