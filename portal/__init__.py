"""The portal: a server-rendered Litestar app (Jinja2 pages, htmx fragments)."""
