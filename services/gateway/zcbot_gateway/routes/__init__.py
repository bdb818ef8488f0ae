"""`/v1` routers of the gateway, one module per resource (auth, tasks, runs, ...)."""
