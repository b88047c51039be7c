"""docker/compose.yaml (CPU) and docker/compose.gpu.yaml (its GPU override) follow the Compose
Specification and describe the deployment: Redis, the API and scalable workers sharing a models volume.

No Docker engine is needed: the files are validated against the Compose Specification's JSON schema, as
vendored by the check-jsonschema package (from the compose-spec/compose-spec repository), with jsonschema.
"""

from __future__ import annotations

import copy
import importlib.resources
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).parents[2]
COMPOSE = ROOT / "docker" / "compose.yaml"
COMPOSE_GPU = ROOT / "docker" / "compose.gpu.yaml"
APP_SERVICES = ("api", "worker")


def compose_schema() -> dict[str, Any]:
    try:
        vendor = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    except ModuleNotFoundError:
        pytest.fail("the Compose Specification schema comes with check-jsonschema: pip install -e '.[test]'")
    return dict(json.loads((vendor / "compose-spec.json").read_text(encoding="utf-8")))


def schema_errors(document: Any) -> list[str]:
    schema = compose_schema()
    cls = jsonschema.validators.validator_for(schema)
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]


def load(path: Path) -> dict[str, Any]:
    return dict(yaml.safe_load(path.read_text(encoding="utf-8")))


def merged(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """`docker compose -f base -f override` for the keys used here: mappings merge, the rest is replaced."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@pytest.fixture(scope="module")
def cpu() -> dict[str, Any]:
    return load(COMPOSE)


@pytest.fixture(scope="module")
def gpu(cpu: dict[str, Any]) -> dict[str, Any]:
    return merged(cpu, load(COMPOSE_GPU))


# -- the specification ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [COMPOSE, COMPOSE_GPU], ids=lambda p: p.name)
def test_compose_file_follows_the_specification(path: Path) -> None:
    assert schema_errors(load(path)) == []


def test_merged_gpu_deployment_follows_the_specification(gpu: dict[str, Any]) -> None:
    assert schema_errors(gpu) == []


def test_schema_rejects_what_compose_rejects(cpu: dict[str, Any]) -> None:
    """The validation has teeth: an unknown key or a misspelled condition is reported."""
    typo = copy.deepcopy(cpu)
    typo["services"]["worker"]["replica"] = 2
    assert any("replica" in e for e in schema_errors(typo))
    wrong = copy.deepcopy(cpu)
    wrong["services"]["api"]["depends_on"]["redis"]["condition"] = "service_ready"
    assert schema_errors(wrong)


# -- the CPU deployment -----------------------------------------------------------------------------


def test_services(cpu: dict[str, Any]) -> None:
    assert set(cpu["services"]) == {"redis", "api", "worker"}
    redis = cpu["services"]["redis"]
    assert redis["image"] == "redis:7-alpine"
    assert redis["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]


def test_api_and_workers_run_one_image_built_from_the_repository(cpu: dict[str, Any]) -> None:
    api, worker = (cpu["services"][name] for name in APP_SERVICES)
    assert api["image"] == worker["image"]
    for service in (api, worker):
        assert (COMPOSE.parent / service["build"]["context"]).resolve() == ROOT
        assert (ROOT / service["build"].get("dockerfile", "Dockerfile")).is_file()
    assert api["command"] == ["api"]
    assert worker["command"] == ["worker"]


def test_api_publishes_port_8000(cpu: dict[str, Any]) -> None:
    assert cpu["services"]["api"]["ports"] == ["8000:8000"]


@pytest.mark.parametrize("name", APP_SERVICES)
def test_api_and_workers_use_redis_once_it_is_healthy(cpu: dict[str, Any], name: str) -> None:
    service = cpu["services"][name]
    assert service["environment"]["REDIS_URL"] == "redis://redis:6379/0"
    assert service["depends_on"] == {"redis": {"condition": "service_healthy"}}


@pytest.mark.parametrize("name", APP_SERVICES)
def test_healthchecks(cpu: dict[str, Any], name: str) -> None:
    test = cpu["services"][name]["healthcheck"]["test"]
    assert test == ["CMD", "python", "/opt/transformer/healthcheck.py", name]


def test_workers_scale(cpu: dict[str, Any]) -> None:
    """`docker compose up --scale worker=N` needs a worker without a fixed name or published port."""
    worker = cpu["services"]["worker"]
    assert "container_name" not in worker
    assert "ports" not in worker
    assert "scale" not in worker and "replicas" not in worker.get("deploy", {})


@pytest.mark.parametrize("name", APP_SERVICES)
def test_models_volume_is_shared_and_persistent(cpu: dict[str, Any], name: str) -> None:
    assert "models:/models" in cpu["services"][name]["volumes"]
    assert cpu["volumes"]["models"] in (None, {})  # a named volume: it survives `docker compose down`
    assert cpu["services"][name]["environment"]["TRANSFORMER_MODELS_DIR"] == "/models"


def test_cpu_image_builds_with_the_dockerfile_default(cpu: dict[str, Any]) -> None:
    for name in APP_SERVICES:
        assert "TORCH_INDEX_URL" not in cpu["services"][name]["build"].get("args", {})


# -- the GPU deployment -----------------------------------------------------------------------------


def test_gpu_deployment_builds_the_cuda_image(cpu: dict[str, Any], gpu: dict[str, Any]) -> None:
    api, worker = (gpu["services"][name] for name in APP_SERVICES)
    assert api["image"] == worker["image"] != cpu["services"]["api"]["image"]
    for service in (api, worker):
        assert service["build"]["context"] == ".."  # the base file's build, with the CUDA torch index
        index = service["build"]["args"]["TORCH_INDEX_URL"]
        assert index.startswith("https://") and not index.endswith("/cpu")


def test_gpu_workers_reserve_a_gpu(gpu: dict[str, Any]) -> None:
    devices = gpu["services"]["worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    assert "deploy" not in gpu["services"]["api"]


def test_gpu_deployment_keeps_the_rest(cpu: dict[str, Any], gpu: dict[str, Any]) -> None:
    """The override only adds: workers still scale, share the models volume and wait for Redis."""
    worker = gpu["services"]["worker"]
    assert "container_name" not in worker and "ports" not in worker
    assert worker["volumes"] == cpu["services"]["worker"]["volumes"]
    assert worker["depends_on"] == {"redis": {"condition": "service_healthy"}}
    assert gpu["services"]["redis"] == cpu["services"]["redis"]
