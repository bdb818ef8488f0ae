"""The agent: the ReAct loop, its guards, cancellation, context building and the LLM stream."""
