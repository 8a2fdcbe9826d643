"""JobSet manifests as job specs: every mapped field, every refusal, every warning."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from corral.formats import FormatError, Resources, load_jobset, parse_jobset
from corral.formats._common import format_loc

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "jobset"
POD = ("spec", "replicatedJobs", 0, "template", "spec", "template", "spec")

BASE = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "metadata": {
        "name": "train",
        "labels": {"kueue.x-k8s.io/queue-name": "vision"},
        "annotations": {
            "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"
        },
    },
    "spec": {
        "failurePolicy": {"maxRestarts": 3},
        "replicatedJobs": [
            {
                "name": "slice",
                "replicas": 2,
                "template": {
                    "spec": {
                        "parallelism": 4,
                        "completions": 4,
                        "backoffLimit": 0,
                        "template": {
                            "spec": {
                                "priorityClassName": "high",
                                "nodeSelector": {
                                    "cloud.google.com/gke-accelerator": "nvidia-h100-80gb"
                                },
                                "containers": [
                                    {
                                        "name": "main",
                                        "command": ["python", "train.py"],
                                        "args": ["--lr", "3e-4"],
                                        "env": [{"name": "SEED", "value": "7"}],
                                        "workingDir": "/srv/proj",
                                        "resources": {"limits": {"nvidia.com/gpu": 8}},
                                    }
                                ],
                            }
                        },
                    }
                },
            }
        ],
    },
}


def jobset(**at: object) -> dict:
    """BASE with values set at key paths written 'pod.containers.0.image' ('pod.' = POD)."""
    data = copy.deepcopy(BASE)
    for path, value in at.items():
        keys: list = [int(k) if k.isdigit() else k for k in path.split("__")]
        if keys[0] == "pod":
            keys = [*POD, *keys[1:]]
        node = data
        for key in keys[:-1]:
            node = node[key]
        if value is None:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value
    return data


def error_of(data: dict, projects=("vision",)) -> str:
    with pytest.raises(FormatError) as info:
        parse_jobset(data, "js.yaml", projects)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_every_mapped_field():
    spec, warnings = parse_jobset(BASE, "js.yaml", ["vision"])
    assert spec.name == "train"
    assert spec.project == "vision"  # the Kueue queue, being one of the submitter's projects
    assert spec.resources == Resources("nvidia-h100-80gb", 8, workers=4, slices=2, exclusive=True)
    assert spec.max_restarts == 3
    assert spec.priority == "high"
    assert spec.command == ("python", "train.py", "--lr", "3e-4")
    assert spec.env == {"SEED": "7"}
    assert spec.workdir == "/srv/proj"
    assert warnings == []


def test_defaults_and_other_spellings():
    data = jobset(
        metadata__annotations=None,
        spec__failurePolicy=None,
        spec__replicatedJobs__0__replicas=None,
        spec__replicatedJobs__0__template__spec__parallelism=None,
        spec__replicatedJobs__0__template__spec__completions=None,
        pod__nodeSelector={"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice"},
        pod__containers__0__resources={"limits": {"google.com/tpu": "4"}},  # quoted quantity
    )
    spec, _ = parse_jobset(data, "js.yaml", ["vision"])
    assert spec.resources == Resources("tpu-v5-lite-podslice", 4, workers=1, slices=1)
    assert spec.max_restarts == 0


def test_queue_that_is_no_project_of_the_user_is_a_warning():
    spec, warnings = parse_jobset(BASE, "js.yaml", ["nlp"])
    assert spec.project == "default"  # left to the server: the user's default project
    assert (
        len(warnings) == 1 and "queue vision is not one of your corral projects" in warnings[0][1]
    )


def test_identical_replicated_jobs_add_up_to_slices():
    data = jobset()
    data["spec"]["replicatedJobs"].append(copy.deepcopy(data["spec"]["replicatedJobs"][0]))
    data["spec"]["replicatedJobs"][1]["name"] = "more"
    spec, _ = parse_jobset(data, "js.yaml", ["vision"])
    assert spec.resources.slices == 4


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"pod__volumes": [{"name": "data"}]}, "spec.volumes: not supported"),
        ({"pod__initContainers": [{"name": "x"}]}, "initContainers: not supported"),
        ({"pod__containers__0__volumeMounts": []}, "containers[0].volumeMounts: not supported"),
        ({"pod__containers__0__envFrom": []}, "containers[0].envFrom: not supported"),
        (
            {"pod__containers__0__env": [{"name": "K", "valueFrom": {"secretKeyRef": {}}}]},
            "env[0].valueFrom: not supported",
        ),
        ({"pod__containers__0__command": None}, "containers[0].command: required"),
        ({"pod__containers": []}, "containers: must list one container"),
        (
            {"spec__replicatedJobs__0__template__spec__completions": 8},
            "completions: must equal parallelism (4)",
        ),
        ({"spec__replicatedJobs__0__replicas": -1}, "replicas: must be a whole number"),
        ({"spec__failurePolicy__maxRestarts": "often"}, "maxRestarts: must be a whole number"),
        ({"metadata__name": "Not_A_Label"}, "metadata.name: must be a DNS-1123 label"),
        ({"pod__containers__0__workingDir": "rel/dir"}, "workingDir: must be an absolute path"),
        ({"apiVersion": "batch/v1"}, "apiVersion: must be jobset.x-k8s.io/v1alpha2"),
        (
            {
                "pod__containers__0__resources": {
                    "limits": {"google.com/tpu": 4, "nvidia.com/gpu": 1}
                }
            },
            "limits: must ask for one accelerator kind",
        ),
    ],
)
def test_what_corral_cannot_honour_is_refused_naming_the_field(change, says):
    message = error_of(jobset(**change))
    assert says in message, message
    assert message.startswith("js.yaml: ")


def test_several_containers_and_different_replicated_jobs_are_refused():
    data = jobset()
    containers = data["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"
    ]
    containers.append({"name": "sidecar", "command": ["true"]})
    assert "found 2 containers" in error_of(data)
    data = jobset()
    other = copy.deepcopy(data["spec"]["replicatedJobs"][0])
    other["name"] = "driver"
    other["template"]["spec"]["parallelism"] = 1
    data["spec"]["replicatedJobs"].append(other)
    message = error_of(data)
    assert "spec.replicatedJobs[1]: corral runs one kind of worker" in message
    assert "(slice, driver)" in message


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"pod__containers__0__image": "python:3.8"}, "containers[0].image"),
        ({"pod__containers__0__imagePullPolicy": "Always"}, "imagePullPolicy"),
        ({"pod__affinity": {}}, "affinity"),
        ({"pod__serviceAccountName": "trainer"}, "serviceAccountName"),
        ({"pod__containers__0__ports": [{"containerPort": 8471}]}, "containers[0].ports"),
        ({"pod__containers__0__securityContext": {"privileged": True}}, "securityContext"),
        ({"pod__securityContext": {"runAsUser": 0}}, "spec.securityContext"),
        ({"pod__hostNetwork": True}, "hostNetwork"),
        ({"pod__dnsPolicy": "ClusterFirstWithHostNet"}, "dnsPolicy"),
        ({"pod__tolerations": []}, "tolerations"),
        ({"pod__schedulerName": "x"}, "schedulerName"),
        (
            {"pod__containers__0__resources": {"limits": {"nvidia.com/gpu": 8, "memory": "1Gi"}}},
            "resources",
        ),
    ],
)
def test_container_world_fields_are_accepted_with_one_warning(change, key):
    spec, warnings = parse_jobset(jobset(**change), "js.yaml", ["vision"])
    assert spec.resources.per_worker == 8
    assert len(warnings) == 1
    loc, text = warnings[0]
    assert key in format_loc(loc) and text.startswith(("ignored", "memory"))


def test_load_jobset_gives_file_lines_for_errors_and_warnings(tmp_path):
    data = jobset(pod__containers__0__image="python:3.8")
    path = tmp_path / "js.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    spec, warnings = load_jobset(path, ["vision"])
    assert spec["resources"]["slices"] == 2
    [warning] = warnings
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "image:" in t)
    assert warning.startswith(f"{path}:{line}: ") and "image: warning: ignored" in warning
    path.write_text(yaml.safe_dump(jobset(pod__volumes=[]), sort_keys=False))
    with pytest.raises(FormatError) as info:
        load_jobset(path, ["vision"])
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "volumes:" in t)
    assert str(info.value).startswith(f"{path}:{line}: ")


@pytest.mark.parametrize("slices", [1, 2, 3])
def test_the_kueue_tutorial_jobsets_parse_to_the_right_specs(slices):
    path = EXAMPLES / f"multislice-{slices}slice.yaml"
    spec, warnings = parse_jobset(yaml.safe_load(path.read_text()), str(path), ["multislice-queue"])
    assert spec.name == f"multislice-{slices}slice"
    assert spec.project == "multislice-queue"
    assert spec.resources == Resources(
        "tpu-v5-lite-podslice", 4, workers=2, slices=slices, exclusive=True
    )
    assert spec.max_restarts == 4
    assert spec.command[:2] == ("bash", "-c")
    # The Standard-cluster variant: host network, DNS policy, image, ports, privileged.
    assert sorted(loc[-1] for loc, _ in warnings) == [
        "dnsPolicy",
        "hostNetwork",
        "image",
        "ports",
        "securityContext",
    ]
