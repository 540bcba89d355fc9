"""Regenerate the committed instance facts from EC2 DescribeInstanceTypes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kiln.catalog.facts import CURATED_PATH, GENERATED_PATH


def _accelerator(item: dict[str, Any]) -> dict[str, Any] | None:
    gpus = (item.get("GpuInfo") or {}).get("Gpus") or []
    if gpus:
        gpu = gpus[0]
        return {
            "kind": "gpu",
            "manufacturer": gpu["Manufacturer"],
            "name": gpu["Name"],
            "count": gpu["Count"],
            "memory_mib": gpu["MemoryInfo"]["SizeInMiB"],
        }
    devices = (item.get("NeuronInfo") or {}).get("NeuronDevices") or []
    if devices:
        device = devices[0]
        return {
            "kind": "neuron",
            "manufacturer": "AWS",
            "name": device["Name"],
            "count": device["Count"],
            "memory_mib": device["MemoryInfo"]["SizeInMiB"],
        }
    return None


def normalize(item: dict[str, Any]) -> dict[str, Any]:
    """Reduce one DescribeInstanceTypes entry to the facts kiln uses."""
    network = item["NetworkInfo"]
    cards = network.get("NetworkCards") or []
    secondary_types = set(cards[1]["InterfaceTypes"]) if len(cards) > 1 else set()
    primary_types = set(cards[0].get("InterfaceTypes", [])) if cards else set()
    storage = item.get("InstanceStorageInfo") or {}
    return {
        "vcpus": item["VCpuInfo"]["DefaultVCpus"],
        "default_threads_per_core": item["VCpuInfo"].get("DefaultThreadsPerCore", 1),
        "memory_mib": item["MemoryInfo"]["SizeInMiB"],
        "architectures": sorted(item["ProcessorInfo"]["SupportedArchitectures"]),
        "accelerator": _accelerator(item),
        "network_performance": network["NetworkPerformance"],
        "network_cards": network.get("MaximumNetworkCards", 1),
        "max_network_interfaces": network["MaximumNetworkInterfaces"],
        "efa_supported": bool(network.get("EfaSupported", False)),
        "max_efa_interfaces": (network.get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0),
        "efa_only_interfaces": "efa-only" in (secondary_types or primary_types),
        "instance_storage_gb": storage.get("TotalSizeInGB", 0),
    }


def describe(client: Any, instance_types: list[str]) -> dict[str, dict[str, Any]]:
    """Call DescribeInstanceTypes for the given types and normalize every page."""
    facts: dict[str, dict[str, Any]] = {}
    paginator = client.get_paginator("describe_instance_types")
    for page in paginator.paginate(InstanceTypes=instance_types):
        for item in page["InstanceTypes"]:
            facts[item["InstanceType"]] = normalize(item)
    missing = sorted(set(instance_types) - set(facts))
    if missing:
        raise LookupError(f"EC2 did not describe: {', '.join(missing)}")
    return dict(sorted(facts.items()))


def refresh(region: str, out: Path = GENERATED_PATH, client: Any = None) -> dict[str, dict[str, Any]]:
    """Describe every curated instance type in REGION and write the generated catalog."""
    import boto3

    curated = json.loads(CURATED_PATH.read_text())["instance_types"]
    ec2 = client or boto3.client("ec2", region_name=region)
    facts = describe(ec2, sorted(curated))
    document = {
        "source": "ec2:DescribeInstanceTypes",
        "region": region,
        "regenerate": "kiln catalog refresh --region REGION",
        "instance_types": facts,
    }
    out.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")
    return facts
