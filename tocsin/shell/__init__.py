"""The shell around the product: the `tocsin` CLI, the process supervisor, embedded services,
the demos and the events API client."""
