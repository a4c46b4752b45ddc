"""A small kustomize renderer for the tests, so the manifests can be validated without the kubectl binary.

It implements the subset of kustomize (https://kubectl.docs.kubernetes.io/references/kustomize/) that
deploy/k8s uses, with kustomize's semantics: ``resources`` (files, and folders holding a kustomization),
``configMapGenerator`` and ``secretGenerator`` from ``files`` (``behavior`` create or replace; name suffix hashes
must be disabled), JSON 6902 ``patches`` (add, replace, remove) selected by kind and name, ``images``
(``newName``/``newTag``) and ``labels`` (metadata labels only). Anything else raises :class:`Unsupported`, so a
manifest using more of kustomize fails the test instead of being validated half-rendered.
"""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import yaml

Object = dict[str, Any]
KNOWN_KEYS = {
    "apiVersion", "kind", "resources", "configMapGenerator", "secretGenerator", "generatorOptions", "patches",
    "images", "labels",
}  # fmt: skip


class Unsupported(ValueError):
    """The kustomization uses a feature this renderer does not implement. Recovery: extend the renderer."""


def build(folder: Path) -> list[Object]:
    """Render the kustomization in ``folder``: the list of Kubernetes objects ``kubectl kustomize`` would give.

    Raises:
        Unsupported: an unknown kustomization key, patch kind or generator option.
        FileNotFoundError: a resource or generator file is missing.
    """
    kust = yaml.safe_load((folder / "kustomization.yaml").read_text())
    unknown = set(kust) - KNOWN_KEYS
    if unknown:
        raise Unsupported(f"{folder}: kustomization keys {sorted(unknown)}")
    if kust.get("configMapGenerator") or kust.get("secretGenerator"):
        if not kust.get("generatorOptions", {}).get("disableNameSuffixHash") and not _inherits_no_hash(folder, kust):
            raise Unsupported(f"{folder}: generators with name suffix hashes")
    objects: list[Object] = []
    for resource in kust.get("resources", []):
        path = folder / resource
        objects += build(path) if path.is_dir() else [o for o in yaml.safe_load_all(path.read_text()) if o]
    for gen in kust.get("configMapGenerator", []):
        _generate(objects, folder, gen, "ConfigMap")
    for gen in kust.get("secretGenerator", []):
        _generate(objects, folder, gen, "Secret")
    for patch in kust.get("patches", []):
        _patch(objects, patch)
    for image in kust.get("images", []):
        _set_image(objects, image)
    for label in kust.get("labels", []):
        if label.get("includeSelectors") or label.get("includeTemplates"):
            raise Unsupported("labels with includeSelectors/includeTemplates")
        for obj in objects:
            obj.setdefault("metadata", {}).setdefault("labels", {}).update(label["pairs"])
    return objects


def _inherits_no_hash(folder: Path, kust: dict) -> bool:
    """An overlay's generator that replaces a base's generated object keeps the base's (unhashed) name."""
    gens = [*kust.get("configMapGenerator", []), *kust.get("secretGenerator", [])]
    return bool(kust.get("resources")) and all(g.get("behavior") == "replace" for g in gens)


def _generate(objects: list[Object], folder: Path, gen: dict, kind: str) -> None:
    data = {}
    for entry in gen.get("files", []):
        key, _, file = entry.partition("=") if "=" in entry else (Path(entry).name, "", entry)
        raw = (folder / file).read_bytes()
        data[key] = raw.decode() if kind == "ConfigMap" else base64.b64encode(raw).decode()
    obj: Object = {"apiVersion": "v1", "kind": kind, "metadata": {"name": gen["name"]}, "data": data}
    if kind == "Secret":
        obj["type"] = "Opaque"
    behavior = gen.get("behavior", "create")
    existing = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == gen["name"]]
    if behavior == "create":
        if existing:
            raise ValueError(f"{kind} {gen['name']} generated twice")
        objects.append(obj)
    elif behavior == "replace" and existing:
        existing[0]["data"] = data
    else:
        raise Unsupported(f"generator behavior {behavior!r} for {kind} {gen['name']}")


def _patch(objects: list[Object], patch: dict) -> None:
    target = patch.get("target", {})
    ops = yaml.safe_load(patch["patch"])
    if not isinstance(ops, list):
        raise Unsupported("strategic merge patches (only JSON 6902 operation lists)")
    matched = [
        o for o in objects
        if o["kind"] == target.get("kind", o["kind"]) and o["metadata"]["name"] == target.get("name", o["metadata"]["name"])
    ]  # fmt: skip
    if not matched:
        raise ValueError(f"patch target {target} matches nothing")
    for obj in matched:
        for op in ops:
            _apply(obj, op)


def _apply(obj: Object, op: dict) -> None:
    """One JSON Patch operation (RFC 6902: add, replace, remove) on ``obj`` in place."""
    *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")]
    node: Any = obj
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    key: Any = int(last) if isinstance(node, list) and last != "-" else last
    if op["op"] == "remove":
        del node[key]
    elif op["op"] == "replace":
        node[key]  # noqa: B018 (RFC 6902: the target must exist)
        node[key] = copy.deepcopy(op["value"])
    elif op["op"] == "add":
        if isinstance(node, list):
            node.insert(len(node) if key == "-" else key, copy.deepcopy(op["value"]))
        else:
            node[key] = copy.deepcopy(op["value"])
    else:
        raise Unsupported(f"JSON patch op {op['op']!r}")


def _set_image(objects: list[Object], image: dict) -> None:
    for obj in objects:
        spec = obj.get("spec", {}).get("template", {}).get("spec", {})
        for container in [*spec.get("containers", []), *spec.get("initContainers", [])]:
            name, _, tag = container["image"].rpartition(":")
            if name == image["name"]:
                container["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag)}"
