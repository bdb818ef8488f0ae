"""Tools: schemas the model sees, host-side tools, the executor client and result shaping."""
