"""One bootstrap per process kind (web, worker, clock, CLI): each wires the settings, the
pool, the broker and the after-commit effects for its process, and nothing else starts one."""
