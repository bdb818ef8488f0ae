"""Tools: schemas the model sees, host-side tools, the executor client, result shaping and the pptx guard
(`pptx_guard`: a check of the decks a tool call made)."""
