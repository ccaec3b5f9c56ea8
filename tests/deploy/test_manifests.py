"""The k8s/ manifests: valid against the Kubernetes schemas, and consistent with each other, the image and the code."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import kubernetes_validate
import pytest
from kubernetes_validate.utils import latest_version

from service.local_redis import persistence_args
from tests.deploy.support import (
    K8S,
    MIN_KUBERNETES,
    ROOT,
    Doc,
    containers,
    exec_form,
    find,
    kustomization,
    manifest_docs,
    parse_dockerfile,
    pod_spec,
)

DOCS = manifest_docs()
# kinds whose schemas come from a CRD, not from Kubernetes: kubernetes-validate bundles no CRD schemas
CRD_GROUPS = {"keda.sh"}
WORKLOADS = ("Deployment", "StatefulSet")
SECRET = "trisk-secrets"


def _labels_match(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector (matchLabels and matchExpressions with In) against a pod's labels."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        assert expr["operator"] == "In", f"only In is modelled here: {expr}"
        if labels.get(expr["key"]) not in expr["values"]:
            return False
    return True


def _pod_labels() -> dict[str, dict[str, str]]:
    return {d.name: d.body["spec"]["template"]["metadata"]["labels"] for d in DOCS if d.kind in WORKLOADS}


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for e in container.get("env", [])}


def _config() -> dict[str, str]:
    return dict(find(DOCS, "ConfigMap", "trisk-config").body["data"])


def _secret_keys() -> set[str]:
    """Keys of the Secret the kustomization generates, as the committed example lists them."""
    (generator,) = [g for g in kustomization()["secretGenerator"] if g["name"] == SECRET]
    (env_file,) = generator["envs"]
    example = K8S / (env_file + ".example")
    keys = set()
    for line in example.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            keys.add(line.split("=", 1)[0])
    return keys


def _image_env() -> dict[str, str]:
    return parse_dockerfile().final.env()


def _effective(name: str) -> str:
    """A setting as the pods see it: the ConfigMap wins over the image's ENV."""
    return _config().get(name) or _image_env()[name]


def _mounted(container: dict[str, Any], path: str, *, writable: bool) -> bool:
    for mount in container.get("volumeMounts", []):
        inside = Path(path) == Path(mount["mountPath"]) or Path(mount["mountPath"]) in Path(path).parents
        if inside and (not writable or not mount.get("readOnly", False)):
            return True
    return False


def _container(workload: str, name: str) -> dict[str, Any]:
    doc = next(d for d in DOCS if d.kind in WORKLOADS and d.name == workload)
    return next(c for c in containers(doc) if c["name"] == name)


# -- schemas


def _schema_cases() -> list[Any]:
    cases = []
    for doc in DOCS:
        for version in (MIN_KUBERNETES, latest_version()):
            group = doc.body["apiVersion"].split("/")[0]
            marks = []
            if group in CRD_GROUPS:
                reason = f"{group} is a CRD: kubernetes-validate has no schema for it (test_keda_* check its fields)"
                marks.append(pytest.mark.skip(reason=reason))
            cases.append(pytest.param(doc, version, id=f"{doc}@{version}", marks=marks))
    return cases


@pytest.mark.parametrize(("doc", "version"), _schema_cases())
def test_manifest_validates_against_the_kubernetes_schema(doc: Doc, version: str) -> None:
    # strict: an unknown or misspelt field is an error, not something the API server would silently drop
    try:
        kubernetes_validate.validate(doc.body, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path)
        pytest.fail(f"{doc} is not a valid {doc.kind} for Kubernetes {version}: {path}: {exc.message}")


# -- the kustomization


def test_kustomization_lists_every_manifest_and_nothing_else() -> None:
    listed = set(kustomization()["resources"])
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk, f"not listed: {sorted(on_disk - listed)}; listed but missing: {sorted(listed - on_disk)}"


def test_the_real_secrets_file_is_ignored_by_git() -> None:
    (generator,) = kustomization()["secretGenerator"]
    (env_file,) = generator["envs"]
    res = subprocess.run(["git", "check-ignore", "-q", f"k8s/{env_file}"], cwd=ROOT, check=False)
    assert res.returncode == 0, f"k8s/{env_file} holds real secrets and must be in .gitignore"
    assert (K8S / f"{env_file}.example").is_file()


def test_every_trisk_image_reference_has_the_kustomization_tag() -> None:
    (image,) = [i for i in kustomization()["images"] if i["name"] == "trisk"]
    refs = {c["image"] for d in DOCS if d.kind in WORKLOADS for c in containers(d) if c["image"].startswith("trisk")}
    assert refs == {f"trisk:{image['newTag']}"}


# -- references between resources


def test_selectors_select_pods() -> None:
    labels = _pod_labels()
    for doc in DOCS:
        if doc.kind in WORKLOADS:
            assert _labels_match(doc.body["spec"]["selector"], labels[doc.name]), f"{doc} selects not its own pods"
        selector = {
            "Service": lambda b: {"matchLabels": b["spec"]["selector"]},
            "PodDisruptionBudget": lambda b: b["spec"]["selector"],
            "NetworkPolicy": lambda b: b["spec"]["podSelector"],
        }.get(doc.kind)
        if selector is not None:
            sel = selector(doc.body)
            if sel:  # an empty podSelector (default deny) selects every pod
                assert any(_labels_match(sel, pod) for pod in labels.values()), f"{doc} selects no pod"


def test_config_secret_and_account_references_resolve() -> None:
    config_maps = {d.name for d in DOCS if d.kind == "ConfigMap"}
    accounts = {d.name for d in DOCS if d.kind == "ServiceAccount"}
    secret_keys = _secret_keys()
    for doc in (d for d in DOCS if d.kind in WORKLOADS):
        spec = pod_spec(doc)
        assert spec["serviceAccountName"] in accounts, doc
        for volume in spec.get("volumes", []):
            if "configMap" in volume:
                assert volume["configMap"]["name"] in config_maps, f"{doc}: volume {volume['name']}"
            if "persistentVolumeClaim" in volume:
                claim = volume["persistentVolumeClaim"]["claimName"]
                assert claim in {d.name for d in DOCS if d.kind == "PersistentVolumeClaim"}, f"{doc}: {claim}"
        for c in containers(doc):
            for source in c.get("envFrom", []):
                assert source["configMapRef"]["name"] in config_maps, f"{doc}/{c['name']}"
            for var in c.get("env", []):
                ref = var.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["name"] == SECRET, f"{doc}/{c['name']}: {var['name']}"
                    assert ref["key"] in secret_keys, f"{doc}/{c['name']}: key {ref['key']} not in the example"


def test_api_and_worker_see_the_same_settings() -> None:
    """The two halves of one service must agree on Redis, the database and the LLM key."""
    api, worker = _container("trisk-api", "api"), _container("trisk-worker", "worker")
    assert api["env"] == worker["env"]
    assert api["envFrom"] == worker["envFrom"]


def test_redis_url_points_at_the_redis_service() -> None:
    redis_service = find(DOCS, "Service", "trisk-redis")
    api = _container("trisk-api", "api")
    env = _env(api)
    url = urlparse(env["REDIS_URL"]["value"].replace("$(REDIS_PASSWORD)", "secret"))
    assert url.hostname == redis_service.name
    assert url.port in {p["port"] for p in redis_service.body["spec"]["ports"]}
    # $(VAR) expands only from variables defined earlier in the list
    names = [e["name"] for e in api["env"]]
    assert names.index("REDIS_PASSWORD") < names.index("REDIS_URL")


# -- the API pod and the image


def test_api_port_is_the_image_commands_port() -> None:
    cmd = exec_form(parse_dockerfile().final.all("CMD")[-1])
    port = int(cmd[cmd.index("--port") + 1])
    api = _container("trisk-api", "api")
    assert "command" not in api and "args" not in api, "the API runs the image's CMD; its port is read from there"
    assert {p["name"]: p["containerPort"] for p in api["ports"]}["http"] == port
    policy = find(DOCS, "NetworkPolicy", "trisk-api-ingress")
    assert [p["port"] for rule in policy.body["spec"]["ingress"] for p in rule["ports"]] == [port]


def test_probes_hit_health_endpoints_the_app_serves() -> None:
    paths = json.loads((ROOT / "openapi" / "openapi.json").read_text(encoding="utf-8"))["paths"]
    api = _container("trisk-api", "api")
    expected = {"startupProbe": "/health/live", "readinessProbe": "/health/ready", "livenessProbe": "/health/live"}
    for probe, path in expected.items():
        assert api[probe]["httpGet"]["path"] == path
        assert path in paths, f"{path} is not an endpoint of the app"
    startup = api["startupProbe"]
    # the whole sutta index loads in ~5 s from a warm disk (k8s/README.md); allow a slow volume well beyond that
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120


def test_index_and_corpus_paths_are_mounted() -> None:
    index_dir = str(Path(_effective("TRISK_INDEX_PATH")).parent)
    build = _container("trisk-api", "build-index")
    assert exec_form(json.dumps(build["command"]))[:2] == ["trisk", "build-index"]
    assert _mounted(build, index_dir, writable=True), "the init container must be able to write the index"
    assert _mounted(_container("trisk-api", "api"), index_dir, writable=False), "the API must see the index"
    for name in ("TRISK_CORPUS_DIR", "TRISK_TRANSLATION_DIR"):
        assert _mounted(build, _effective(name), writable=False), f"{name} is not on a volume of build-index"


def test_every_container_has_a_writable_tmp_under_its_read_only_root() -> None:
    for doc in (d for d in DOCS if d.kind in WORKLOADS):
        for c in containers(doc):
            assert c["securityContext"]["readOnlyRootFilesystem"] is True, f"{doc}/{c['name']}"
            if c["image"].startswith("trisk"):
                assert _mounted(c, _image_env()["HOME"], writable=True), f"{doc}/{c['name']}: HOME not writable"


def test_pods_run_as_the_images_user() -> None:
    user = parse_dockerfile().final.all("USER")[-1]
    uid, gid = (int(x) for x in user.split(":"))
    for name in ("trisk-api", "trisk-worker"):
        ctx = pod_spec(find(DOCS, "Deployment", name))["securityContext"]
        assert (ctx["runAsUser"], ctx["runAsGroup"]) == (uid, gid), name


def test_migrations_run_before_the_api_serves() -> None:
    init = [c["name"] for c in pod_spec(find(DOCS, "Deployment", "trisk-api"))["initContainers"]]
    assert init[0] == "db-upgrade"
    upgrade = _container("trisk-api", "db-upgrade")
    assert upgrade["command"] == ["trisk", "db", "upgrade"]
    assert _env(upgrade)["TRISK_DATABASE_URL"] == _env(_container("trisk-api", "api"))["TRISK_DATABASE_URL"]


# -- the worker, its drain and its autoscaling


def _worker_settings() -> Any:
    from workers.settings import WorkerSettings

    return WorkerSettings


def test_worker_command_names_the_worker_settings() -> None:
    command = _container("trisk-worker", "worker")["command"]
    assert command[0] == "arq"
    module, _, attr = command[1].rpartition(".")
    assert f"{module}.{attr}" == f"{_worker_settings().__module__}.{_worker_settings().__name__}"


# the seconds a worker needs after its drain to close its Redis and database clients and exit, and the most the
# grace period may exceed the drain (an over-long grace period only slows rollouts and scale-downs)
SHUTDOWN_SECONDS = 15
GRACE_SLACK_SECONDS = 60


def test_worker_grace_period_covers_its_drain() -> None:
    """Drain = how long arq waits for running jobs on SIGTERM (job_completion_wait), and at least the timeout of the
    cheap job, which every assessment goes through; LLM jobs beyond that are cancelled and re-run elsewhere."""
    settings = _worker_settings()
    timeouts = {f.name: f.timeout_s for f in settings.functions}
    drain = max(getattr(settings, "job_completion_wait", 0), timeouts["assess_cheap"])
    grace = pod_spec(find(DOCS, "Deployment", "trisk-worker"))["terminationGracePeriodSeconds"]
    assert drain + SHUTDOWN_SECONDS <= grace <= drain + GRACE_SLACK_SECONDS, (drain, grace)


def test_keda_scales_the_worker_on_the_arq_queue() -> None:
    scaled = find(DOCS, "ScaledObject", "trisk-worker").body["spec"]
    assert scaled["scaleTargetRef"]["name"] == "trisk-worker"
    assert "replicas" not in find(DOCS, "Deployment", "trisk-worker").body["spec"], "KEDA owns the replica count"
    (trigger,) = scaled["triggers"]
    assert trigger["type"] == "redis"
    meta = trigger["metadata"]
    assert meta["listName"] == _config()["TRISK_QUEUE_NAME"]
    assert int(meta["listLength"]) == _worker_settings().max_jobs
    host, _, port = meta["address"].rpartition(":")
    redis_service = find(DOCS, "Service", "trisk-redis")
    assert host.split(".")[:2] == [redis_service.name, redis_service.body["metadata"]["namespace"]]
    assert int(port) in {p["port"] for p in redis_service.body["spec"]["ports"]}
    url = _env(_container("trisk-worker", "worker"))["REDIS_URL"]["value"]
    assert meta["databaseIndex"] == urlparse(url).path.lstrip("/")
    auth = find(DOCS, "TriggerAuthentication", trigger["authenticationRef"]["name"]).body["spec"]
    for ref in auth["secretTargetRef"]:
        assert ref["name"] == SECRET and ref["key"] in _secret_keys()
    assert scaled["minReplicaCount"] >= 1 and scaled["maxReplicaCount"] > scaled["minReplicaCount"]


# -- Redis


def _redis_conf() -> dict[str, str]:
    text = find(DOCS, "ConfigMap", "trisk-redis").body["data"]["redis.conf"]
    conf = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.strip().partition(" ")
            conf[key] = value
    return conf


def _bytes(quantity: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([A-Za-z]*)", quantity).groups()  # type: ignore[union-attr]
    scale = {"": 1, "mb": 1 << 20, "gb": 1 << 30, "Mi": 1 << 20, "Gi": 1 << 30}[unit]
    return int(number) * scale


def test_redis_is_durable_and_never_evicts() -> None:
    conf = _redis_conf()
    assert conf["appendonly"] == "yes"
    assert conf["maxmemory-policy"] == "noeviction"
    # the fsync policy chosen from bench/bench_redis_durability.py, the same wherever the service starts a Redis
    for name, value in _options(persistence_args()).items():
        assert conf.get(name, "").strip('"') == value, f"k8s/redis.yaml: {name} {conf.get(name)!r}, not {value!r}"
    sts = find(DOCS, "StatefulSet", "trisk-redis")
    (redis,) = pod_spec(sts)["containers"]
    # Redis must refuse writes before the kernel kills it, with room for an AOF rewrite's copy-on-write
    assert _bytes(conf["maxmemory"]) <= 0.7 * _bytes(redis["resources"]["limits"]["memory"])
    (data,) = [m for m in redis["volumeMounts"] if m["mountPath"] == conf["dir"]]
    assert data["name"] in {t["metadata"]["name"] for t in sts.body["spec"]["volumeClaimTemplates"]}


# -- who may talk to whom


def _peer_components(peer: dict[str, Any]) -> str:
    labels = peer.get("podSelector", {}).get("matchLabels", {})
    return str(labels.get("app.kubernetes.io/component") or labels.get("app") or "?")


def test_only_api_worker_and_the_autoscaler_reach_redis() -> None:
    redis_labels = _pod_labels()["trisk-redis"]
    sources = set()
    for doc in (d for d in DOCS if d.kind == "NetworkPolicy"):
        spec = doc.body["spec"]
        if not spec["podSelector"] or not _labels_match(spec["podSelector"], redis_labels):
            continue
        for rule in spec.get("ingress", []):
            assert rule.get("from"), f"{doc} lets anyone reach Redis"
            sources |= {_peer_components(peer) for peer in rule["from"]}
    assert sources == {"api", "worker", "keda-operator"}


def test_everything_else_is_denied_by_default() -> None:
    deny = [d for d in DOCS if d.kind == "NetworkPolicy" and not d.body["spec"]["podSelector"]]
    assert len(deny) == 1
    spec = deny[0].body["spec"]
    assert set(spec["policyTypes"]) == {"Ingress", "Egress"} and not spec.get("ingress") and not spec.get("egress")


def test_only_api_and_worker_pods_may_reach_postgresql() -> None:
    labels = _pod_labels()
    for doc in (d for d in DOCS if d.kind == "NetworkPolicy"):
        for rule in doc.body["spec"].get("egress", []):
            assert rule.get("ports"), f"{doc}: an egress rule without ports reaches every port, PostgreSQL's too"
            if any(p["port"] == 5432 for p in rule.get("ports", [])):
                selected = {n for n, pod in labels.items() if _labels_match(doc.body["spec"]["podSelector"], pod)}
                assert selected == {"trisk-api", "trisk-worker"}, doc


def _options(args: list[str]) -> dict[str, str]:
    """``--name value`` pairs of a redis-server command line."""
    return {a.removeprefix("--"): args[i + 1] for i, a in enumerate(args) if a.startswith("--") and i + 1 < len(args)}


def test_make_up_starts_redis_as_the_cluster_runs_it() -> None:
    """scripts/redis.sh (`make up`, the test script) persists and refuses to evict as k8s/redis.yaml and the tests'
    private servers (service/local_redis.py) do."""
    script = (ROOT / "scripts" / "redis.sh").read_text(encoding="utf-8").replace("\\\n", " ")
    (start,) = [ln for ln in script.splitlines() if ln.startswith("redis-server ")]
    started = _options(shlex.split(start))
    for name, value in _options(persistence_args()).items():
        assert started.get(name) == value, f"scripts/redis.sh: --{name} {started.get(name)!r}, not {value!r}"
