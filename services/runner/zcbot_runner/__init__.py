"""The runner: pulls run requests from JetStream and drives the agent loop."""
