"""Check a PyTorchJob against the training operator's own types: the kubeflow-training SDK's models (generated from
the v1 CRD of the pinned operator release), and its pod templates against Kubernetes's schema for the cluster's
version (kubernetes-validate, strict)."""

from __future__ import annotations

import re
from typing import Any

import kubernetes_validate
from kubeflow.training import models

SCALARS = {"str": str, "int": int, "bool": bool}
_MAP = re.compile(r"dict\(str, (\w+)\)")


def check_pytorchjob(job: dict[str, Any], kubernetes_version: str) -> None:
    """Raise AssertionError (or kubernetes-validate's error) for a field the operator's types do not have, a value of
    the wrong type, a missing required field, or a pod template Kubernetes would refuse."""
    _check(job, "KubeflowOrgV1PyTorchJob", "", kubernetes_version)


def _check(data: Any, type_name: str, path: str, version: str) -> Any:
    if type_name in SCALARS:
        assert isinstance(data, SCALARS[type_name]) and not (type_name == "int" and isinstance(data, bool)), (
            f"{path}: {data!r} is not {type_name}"
        )
        return data
    mapped = _MAP.fullmatch(type_name)
    if mapped:
        assert isinstance(data, dict), f"{path}: not a map"
        return {key: _check(value, mapped.group(1), f"{path}.{key}", version) for key, value in data.items()}
    if type_name == "V1PodTemplateSpec":
        wrapper = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "check"}, "template": data}
        kubernetes_validate.validate(wrapper, version, strict=True)
        return data
    if type_name == "V1ObjectMeta":
        wrapper = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": data}
        kubernetes_validate.validate(wrapper, version, strict=True)
        return data
    klass = getattr(models, type_name)
    fields = {json_name: attr for attr, json_name in klass.attribute_map.items()}
    assert isinstance(data, dict), f"{path}: not an object"
    unknown = sorted(set(data) - set(fields))
    assert not unknown, f"{path}: {type_name} has no field {', '.join(unknown)}"
    kwargs = {
        fields[key]: _check(value, klass.openapi_types[fields[key]], f"{path}.{key}", version)
        for key, value in data.items()
    }
    # The model's own setters refuse a required field left out (client-side validation is on by default).
    klass(**kwargs)
    return data
