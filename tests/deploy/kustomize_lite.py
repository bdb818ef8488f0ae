"""A small kustomize for the tests: renders deploy/k8s without a kustomize binary.

The tests prefer `kubectl kustomize` (or `kustomize build`) when one is installed and compare it
with this renderer (test_manifests.py::test_lite_renderer_matches_kustomize), so this file only
has to be exact for the features deploy/k8s uses:

- `resources` (YAML files, multi-document, and directories holding a kustomization),
- `components` (kind: Component: its resources, generators and patches applied to the parent's
  resources, before the parent's own generators, as kustomize does),
- `namespace`, `labels` (`pairs`, `includeTemplates`; not `includeSelectors`), `images`,
- `patches` (strategic-merge patches from `path` or inline `patch`, target taken from the patch's
  kind/name; `$patch: delete`; list merge keys of the core workload fields),
- `secretGenerator` / `configMapGenerator` with `envs` / `literals` / `files` and
  `options.disableNameSuffixHash: true`; a resource annotated `config.kubernetes.io/local-config`
  is left out of the output,
- `replacements` (a source's `fieldPath` into targets selected by kind and name; dotted field paths,
  list items by index; no options), after the kustomization's patches.

Anything else in a kustomization raises `Unsupported`, so a manifest change that needs more never
renders silently wrong.
"""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import yaml

Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")

# Kinds without a namespace (the ones a zcbot overlay could plausibly contain).
CLUSTER_SCOPED = {
    "Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "PersistentVolume",
    "StorageClass", "PriorityClass", "RuntimeClass", "IngressClass", "APIService", "Node",
    "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding", "CSIDriver", "VolumeSnapshotClass", "ClusterIssuer",
}

# Workloads whose pod template labels `labels[].includeTemplates` reaches.
TEMPLATE_KINDS = {"Deployment", "ReplicaSet", "DaemonSet", "StatefulSet", "Job", "ReplicationController"}

# Strategic-merge list keys (patchMergeKey) of the fields our patches may touch.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
    "volumeClaimTemplates": None,  # replaced, like kustomize does for lists without a key
}

SUPPORTED_KEYS = {
    "apiVersion", "kind", "resources", "components", "namespace", "labels", "images", "patches",
    "secretGenerator", "configMapGenerator", "replacements",
}
LOCAL_CONFIG = "config.kubernetes.io/local-config"


class Unsupported(RuntimeError):
    """The kustomization uses a feature this renderer does not implement."""


# ---- loading --------------------------------------------------------------------------------
def _kustomization_file(directory: Path) -> Path:
    for name in KUSTOMIZATION_FILES:
        path = directory / name
        if path.is_file():
            return path
    raise FileNotFoundError(f"no kustomization file in {directory}")


def _load_docs(path: Path) -> list[dict[str, Any]]:
    with path.open() as fh:
        return [doc for doc in yaml.load_all(fh, Loader=Loader) if doc]


def _gvk_name(doc: dict[str, Any]) -> tuple[str, str, str]:
    group = doc.get("apiVersion", "").split("/")[0] if "/" in doc.get("apiVersion", "") else ""
    return group, doc["kind"], doc["metadata"]["name"]


# ---- transformers ----------------------------------------------------------------------------
def _strategic_merge(base: Any, patch: Any, field: str | None = None) -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            if key == "$patch":
                if value == "replace":
                    return {k: v for k, v in patch.items() if k != "$patch"}
                raise Unsupported(f"$patch: {value} inside a map")
            if value is None:
                out.pop(key, None)
            elif key in out:
                out[key] = _strategic_merge(out[key], value, key)
            else:
                out[key] = copy.deepcopy(value)
        return out
    if isinstance(base, list) and isinstance(patch, list):
        key = MERGE_KEYS.get(field or "")
        if key is None or not all(isinstance(i, dict) for i in base + patch):
            return copy.deepcopy(patch)
        out = [copy.deepcopy(i) for i in base]
        for item in patch:
            if item.get("$patch") == "delete":
                out = [i for i in out if i.get(key) != item.get(key)]
                continue
            for idx, existing in enumerate(out):
                if existing.get(key) == item.get(key):
                    out[idx] = _strategic_merge(existing, item, field)
                    break
            else:
                out.append(copy.deepcopy(item))
        return out
    return copy.deepcopy(patch)


def _apply_patch(resources: list[dict[str, Any]], patch: dict[str, Any]) -> list[dict[str, Any]]:
    target = _gvk_name(patch)
    matches = [r for r in resources if _gvk_name(r) == target]
    if len(matches) != 1:
        raise ValueError(f"patch target {target} matched {len(matches)} resources")
    if patch.get("$patch") == "delete":
        return [r for r in resources if r is not matches[0]]
    body = {k: v for k, v in patch.items() if k != "$patch"}
    merged = _strategic_merge(matches[0], body)
    return [merged if r is matches[0] else r for r in resources]


def _set_labels(resources: list[dict[str, Any]], spec: dict[str, Any]) -> None:
    unknown = set(spec) - {"pairs", "includeTemplates", "includeSelectors"}
    if unknown or spec.get("includeSelectors"):
        raise Unsupported(f"labels options {sorted(unknown) or ['includeSelectors: true']}")
    pairs = spec.get("pairs") or {}
    for res in resources:
        res.setdefault("metadata", {}).setdefault("labels", {}).update(pairs)
        if not spec.get("includeTemplates"):
            continue
        if res["kind"] in TEMPLATE_KINDS:
            tmpl = res.setdefault("spec", {}).setdefault("template", {}).setdefault("metadata", {})
            tmpl.setdefault("labels", {}).update(pairs)
        if res["kind"] == "StatefulSet":
            for claim in res["spec"].get("volumeClaimTemplates") or []:
                claim.setdefault("metadata", {}).setdefault("labels", {}).update(pairs)
        if res["kind"] == "CronJob":
            raise Unsupported("labels on CronJob templates")


def _split_image(image: str) -> tuple[str, str | None, str | None]:
    digest = None
    if "@" in image:
        image, digest = image.split("@", 1)
    tag = None
    last = image.rsplit("/", 1)[-1]
    if ":" in last:
        image, tag = image.rsplit(":", 1)
    return image, tag, digest


def _set_images(node: Any, entries: list[dict[str, Any]]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers", "ephemeralContainers") and isinstance(value, list):
                for container in value:
                    if isinstance(container, dict) and isinstance(container.get("image"), str):
                        container["image"] = _retag(container["image"], entries)
            else:
                _set_images(value, entries)
    elif isinstance(node, list):
        for item in node:
            _set_images(item, entries)


def _retag(image: str, entries: list[dict[str, Any]]) -> str:
    name, tag, digest = _split_image(image)
    for entry in entries:
        if set(entry) - {"name", "newName", "newTag", "digest"}:
            raise Unsupported(f"images entry {entry}")
        if entry["name"] != name:
            continue
        name = entry.get("newName", name)
        if "digest" in entry:
            return f"{name}@{entry['digest']}"
        tag = entry.get("newTag", tag)
        break
    out = name + (f":{tag}" if tag else "")
    return out + (f"@{digest}" if digest else "")


# ---- generators -----------------------------------------------------------------------------
def _read_env_file(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"{path}: line without '=': {line!r}")
        out[key.strip()] = value
    return out


def _generate(spec: dict[str, Any], kind: str, root: Path) -> dict[str, Any]:
    unknown = set(spec) - {"name", "envs", "literals", "files", "options", "type"}
    options = spec.get("options") or {}
    if unknown or set(options) - {"disableNameSuffixHash", "labels", "annotations"}:
        raise Unsupported(f"{kind} generator fields {sorted(unknown | set(options))}")
    if not options.get("disableNameSuffixHash"):
        raise Unsupported(f"{kind} generator {spec['name']}: name suffix hashes (set disableNameSuffixHash)")
    values: dict[str, str] = {}
    for env in spec.get("envs") or []:
        values.update(_read_env_file(root / env))
    for literal in spec.get("literals") or []:
        key, _, value = literal.partition("=")
        values[key] = value
    for item in spec.get("files") or []:
        key, sep, rel = item.partition("=")
        path = root / (rel if sep else key)
        values[key if sep else path.name] = path.read_text()
    meta: dict[str, Any] = {"name": spec["name"]}
    if options.get("labels"):
        meta["labels"] = dict(options["labels"])
    if options.get("annotations"):
        meta["annotations"] = dict(options["annotations"])
    if kind == "Secret":
        data = {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}
        return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": spec.get("type", "Opaque"), "data": data}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": values}


# ---- replacements -------------------------------------------------------------------------------
def _path(field_path: str) -> list[str | int]:
    return [int(part) if part.isdigit() else part for part in field_path.split(".")]


def _select(resources: list[dict[str, Any]], spec: dict[str, Any]) -> list[dict[str, Any]]:
    if set(spec) - {"kind", "name"}:
        raise Unsupported(f"replacement selectors {sorted(set(spec) - {'kind', 'name'})}")
    return [r for r in resources if r["kind"] == spec.get("kind", r["kind"])
            and r["metadata"]["name"] == spec.get("name", r["metadata"]["name"])]


def _replace(resources: list[dict[str, Any]], spec: dict[str, Any]) -> None:
    source = spec["source"]
    if set(spec) - {"source", "targets"} or set(source) - {"kind", "name", "fieldPath"}:
        raise Unsupported(f"replacement fields {sorted(set(spec) | set(source))}")
    (origin,) = _select(resources, {"kind": source["kind"], "name": source["name"]})
    value: Any = origin
    for part in _path(source["fieldPath"]):
        value = value[part]
    for target in spec["targets"]:
        if set(target) - {"select", "fieldPaths"}:
            raise Unsupported(f"replacement target fields {sorted(target)}")
        for res in _select(resources, target["select"]):
            for field_path in target["fieldPaths"]:
                *parents, last = _path(field_path)
                node: Any = res
                for part in parents:
                    node = node[part]
                node[last] = copy.deepcopy(value)


# ---- build ----------------------------------------------------------------------------------
def _patches(spec: list[dict[str, Any]], root: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for entry in spec:
        if set(entry) - {"path", "patch"}:
            raise Unsupported(f"patch options {sorted(set(entry) - {'path', 'patch'})} (targets)")
        if "path" in entry:
            docs = _load_docs(root / entry["path"])
        else:
            docs = [d for d in yaml.load_all(entry["patch"], Loader=Loader) if d]
        if any(not isinstance(d, dict) or "kind" not in d for d in docs):
            raise Unsupported("JSON 6902 patches")
        out.extend(docs)
    return out


def _apply(kust: dict[str, Any], root: Path, resources: list[dict[str, Any]], *, component: bool) -> list[dict[str, Any]]:
    expected_kind = "Component" if component else "Kustomization"
    if kust.get("kind", "Kustomization") != expected_kind:
        raise ValueError(f"{root}: kind {kust.get('kind')!r}, expected {expected_kind}")
    unknown = set(kust) - SUPPORTED_KEYS
    if unknown:
        raise Unsupported(f"{root}: {sorted(unknown)}")
    for entry in kust.get("resources") or []:
        path = (root / entry).resolve()
        resources.extend(build(path) if path.is_dir() else _load_docs(path))
    for entry in kust.get("components") or []:
        path = (root / entry).resolve()
        comp = yaml.load(_kustomization_file(path).read_text(), Loader=Loader)
        resources = _apply(comp, path, resources, component=True)
    for spec in kust.get("configMapGenerator") or []:
        resources.append(_generate(spec, "ConfigMap", root))
    for spec in kust.get("secretGenerator") or []:
        resources.append(_generate(spec, "Secret", root))
    for patch in _patches(kust.get("patches") or [], root):
        resources = _apply_patch(resources, patch)
    for spec in kust.get("replacements") or []:
        _replace(resources, spec)
    if kust.get("namespace"):
        for res in resources:
            if res["kind"] not in CLUSTER_SCOPED:
                res.setdefault("metadata", {})["namespace"] = kust["namespace"]
    for spec in kust.get("labels") or []:
        _set_labels(resources, spec)
    if kust.get("images"):
        for res in resources:
            _set_images(res, kust["images"])
    return resources


def build(directory: str | Path) -> list[dict[str, Any]]:
    """Render the kustomization in `directory` to a list of resource documents."""
    root = Path(directory).resolve()
    kust = yaml.load(_kustomization_file(root).read_text(), Loader=Loader)
    resources = _apply(kust, root, [], component=False)
    resources = [r for r in resources if (r["metadata"].get("annotations") or {}).get(LOCAL_CONFIG) != "true"]
    seen: set[tuple[str, str, str, str | None]] = set()
    for res in resources:
        ident = (*_gvk_name(res), res["metadata"].get("namespace"))
        if ident in seen:
            raise ValueError(f"duplicate resource {ident}")
        seen.add(ident)
    return copy.deepcopy(resources)
