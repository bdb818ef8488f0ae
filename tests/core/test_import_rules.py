"""Who may import whom (issue 41): `zcbot_core.platform` (process plumbing) and `zcbot_core.bus` (the
protocol) are what every service stands on, so they import no feature. Their modules import, of the
project's own code, only the infrastructure below; any other project module (a zcbot_core feature package
such as `workspace` or `agent`, or a service) fails here with the module and what it imports. Every
`import` counts, at module level, under `TYPE_CHECKING` and inside a function alike (the graph of
tests/core/test_import_cycles.py); `settings_doc`'s table names the services' settings classes as strings
(a generator run by hand), which is no import.
"""

from __future__ import annotations

from test_import_cycles import import_graph, module_files

RULED = ("zcbot_core.platform", "zcbot_core.bus")
INFRASTRUCTURE = ("zcbot_core.platform", "zcbot_core.bus", "zcbot_core.db", "zcbot_core.errors")
EXCEPTIONS = {  # (importer, imported) -> why it is allowed
    ("zcbot_core.platform.service", "zcbot_core.llm.profiles"):
        "every service refuses to start on an invalid model profile file; the check reads config/models and "
        "imports only platform.config",
}


def inside(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def violations(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) pairs where a platform/bus module imports a project module above them."""
    return sorted((mod, target) for mod, targets in graph.items() if inside(mod, RULED)
                  for target in targets
                  if target != "zcbot_core" and not inside(target, INFRASTRUCTURE)
                  and (mod, target) not in EXCEPTIONS)


def test_the_rule_sees_a_feature_import() -> None:
    graph = {"zcbot_core.bus.codec": {"zcbot_core.errors", "zcbot_core.workspace.tasks"},
             "zcbot_core.platform.worker": {"zcbot_gateway.app", "zcbot_core.db.models", "zcbot_core"},
             "zcbot_core.workspace.tasks": {"zcbot_core.agent.loop"},
             "zcbot_core.platform.service": {"zcbot_core.llm.profiles"}}
    assert violations(graph) == [("zcbot_core.bus.codec", "zcbot_core.workspace.tasks"),
                                 ("zcbot_core.platform.worker", "zcbot_gateway.app")]


def test_platform_and_bus_import_no_feature() -> None:
    graph = import_graph(module_files())
    assert "zcbot_core.platform.config" in graph and "zcbot_core.bus.topology" in graph
    assert not violations(graph), "platform/ and bus/ import a feature (docs/architecture.md says who may import whom)"
    # an exception no longer needed goes from the list
    stale = [pair for pair in EXCEPTIONS if pair[1] not in graph.get(pair[0], set())]
    assert not stale, stale
