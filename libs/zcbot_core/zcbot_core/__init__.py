"""zcbot_core: everything the zcbot services share, grouped by concern (`platform`, `bus`, `db`, `safe_fs`,
`accounts`, `workspace`, the agent's `llm` / `agent` / `tools`, ...; docs/architecture.md says who may import whom)."""

import os as _os

# LiteLLM fetches its model price map from the network at import unless told otherwise;
# the machines zcbot runs on may have no internet, so the bundled map is the default.
_os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

__version__ = "0.1.0"
