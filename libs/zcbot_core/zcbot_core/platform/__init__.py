"""Process plumbing every zcbot service shares: the settings object (`config`), its README table
(`settings_doc`), logging (`logs`), a service's lifecycle and runtime (`service`) and the background-task /
pull-consumer toolkit (`worker`).

Anything may import it; it imports only `platform`, `bus`, `db` and `errors` of zcbot_core (and the model
profile check at start-up, `llm.profiles`), never a feature (tests/core/test_import_rules.py).
"""
