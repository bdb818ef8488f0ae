"""LLM access: model profiles (YAML), the LiteLLM streaming client, capability probing."""
