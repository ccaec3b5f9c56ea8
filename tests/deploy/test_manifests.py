"""The k8s/ manifests: valid against the Kubernetes schemas, and consistent with each other, the image and the code."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from service.platform.settings import FILE_SUFFIX, RedisSettings, declared_settings
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
from tests.support.local_redis import persistence_args

# about how long this file takes on a quiet two-core machine (s): xdist workers start with the longest
pytestmark = pytest.mark.long(35)

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


# what only the workers get: the LLM provider's key, and encoder threads from their CPU limit
WORKER_ONLY = {"TRISK_LLM_API_KEY_FILE", "TRISK_EMBEDDING_THREADS"}


def test_api_and_worker_see_the_same_settings() -> None:
    """The two halves of one service must agree on Redis, the database and the CA; only the workers hold the LLM key."""
    api, worker = _container("trisk-api", "api"), _container("trisk-worker", "worker")
    assert api["envFrom"] == worker["envFrom"]
    assert _env(api) == {k: v for k, v in _env(worker).items() if k not in WORKER_ONLY}
    assert set(_env(worker)) >= WORKER_ONLY


def _secret_items(doc: Doc, volume_name: str) -> dict[str, str]:
    (volume,) = [v for v in pod_spec(doc)["volumes"] if v["name"] == volume_name]
    return {i["path"]: i["key"] for i in volume["secret"]["items"]}


def test_no_secret_is_an_environment_variable() -> None:
    """Secrets are files (a mounted Secret), never environment variables: those show in `kubectl describe`, in
    crash dumps and in every child process."""
    for doc in (d for d in DOCS if d.kind in WORKLOADS):
        for c in containers(doc):
            for var in c.get("env", []):
                assert "secretKeyRef" not in var.get("valueFrom", {}), f"{doc}/{c['name']}: {var['name']} from a Secret"


def test_secret_files_are_mounted_where_the_settings_read_them() -> None:
    """Every <VARIABLE>_FILE names a file of a mounted Secret volume holding that Secret key, for a declared
    setting (service/platform/settings.py reads <VARIABLE> from it)."""
    declared = {spec.env for _, spec in declared_settings()}
    secret_keys = _secret_keys()
    for doc in (d for d in DOCS if d.kind in WORKLOADS and d.name.startswith("trisk-")):
        volumes = {v["name"]: v for v in pod_spec(doc).get("volumes", [])}
        for c in containers(doc):
            for name, var in _env(c).items():
                if not name.endswith(FILE_SUFFIX):
                    continue
                assert name.removesuffix(FILE_SUFFIX) in declared, f"{doc}/{c['name']}: {name} reads no setting"
                path = Path(var["value"])
                (mount,) = [m for m in c["volumeMounts"] if Path(m["mountPath"]) == path.parent]
                assert mount.get("readOnly") is True, f"{doc}/{c['name']}: {mount}"
                volume = volumes[mount["name"]]
                assert volume["secret"]["secretName"] == SECRET
                key = _secret_items(doc, mount["name"])[path.name]
                assert key in secret_keys, f"{doc}/{c['name']}: {name} -> key {key} not in the example"


def test_the_api_holds_no_llm_key() -> None:
    api_doc = find(DOCS, "Deployment", "trisk-api")
    for c in containers(api_doc):
        assert not any(n.startswith("TRISK_LLM_API_KEY") for n in _env(c)), c["name"]
    for volume in pod_spec(api_doc)["volumes"]:
        if volume.get("secret", {}).get("secretName") == SECRET:
            assert "TRISK_LLM_API_KEY" not in {i["key"] for i in volume["secret"]["items"]}


def test_redis_url_points_at_the_redis_service_and_names_no_password() -> None:
    redis_service = find(DOCS, "Service", "trisk-redis")
    url = urlparse(_config()["REDIS_URL"])
    assert url.hostname == redis_service.name and url.password is None
    assert url.port in {p["port"] for p in redis_service.body["spec"]["ports"]}
    for name in ("trisk-api", "trisk-worker"):
        c = _container(name, "api" if name == "trisk-api" else "worker")
        assert "REDIS_URL" not in _env(c), f"{name}: REDIS_URL comes from the ConfigMap"
        assert _env(c)["TRISK_REDIS_PASSWORD_FILE"]["value"].endswith("/REDIS_PASSWORD")


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
    # the whole sutta index (in the image) loads and verifies in ~6 s (k8s/README.md): a minute covers a slow node,
    # and a pod that takes longer is restarted rather than left starting for minutes
    assert 30 <= startup["periodSeconds"] * startup["failureThreshold"] <= 60


def test_the_index_comes_with_the_image() -> None:
    """Built once, in the image's index stage, and read by API and workers from the same path: no pod builds one,
    none mounts a corpus or an index volume (no ReadOnlyMany claim, nothing to fill by hand)."""
    df = parse_dockerfile()
    index_stage = df.stage("index")
    (run,) = index_stage.all("RUN")
    tokens = shlex.split(run)
    assert tokens[:2] == ["/opt/venv/bin/trisk", "build-index"] and "--expect-corpus-sha256" in tokens, run
    built = tokens[tokens.index("--out") + 1]
    copies = [shlex.split(c) for c in df.final.all("COPY") if "--from=index" in c]
    assert [c[1:] for c in copies] == [[built, "./index/pli-sutta.trisk"]]
    workdir = df.final.all("WORKDIR")[-1]
    assert _image_env()["TRISK_INDEX_PATH"] == f"{workdir}/index/pli-sutta.trisk"
    assert "TRISK_INDEX_PATH" not in _config()
    for doc in (d for d in DOCS if d.kind in WORKLOADS):
        for c in containers(doc):
            assert "build-index" not in c.get("command", []), f"{doc}/{c['name']} builds an index"
            assert "TRISK_INDEX_PATH" not in _env(c), f"{doc}/{c['name']}: the image's path is the one path"
        for volume in pod_spec(doc).get("volumes", []):
            assert "persistentVolumeClaim" not in volume, f"{doc}: {volume['name']}"
    assert not [d for d in DOCS if d.kind == "PersistentVolumeClaim"], "no claim: the index is in the image"


def test_the_image_build_pins_the_shared_corpus_snapshot() -> None:
    """CORPUS_SHA256 in the Dockerfile is the sutta corpus of the snapshot beside the checkout (shared/), read as
    `trisk build-index` reads it: the image is built from the corpus the tests and benchmarks use."""
    from service.core.corpus import load_bilara
    from service.core.novelty import corpus_hash
    from service.platform.settings import get_settings

    s = get_settings().index
    passages = load_bilara(s.corpus_dir, subdir="sutta", lang="pli", translation_dir=s.translation_dir)
    assert parse_dockerfile().args["CORPUS_SHA256"] == corpus_hash(passages)


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
    api = _container("trisk-api", "api")
    for name in ("TRISK_DATABASE_URL_FILE", "PGSSLROOTCERT"):
        assert _env(upgrade)[name] == _env(api)[name], name


# -- the worker, its drain and its autoscaling


def _worker_settings() -> Any:
    from workers.settings import WorkerSettings

    return WorkerSettings


def test_worker_command_names_the_worker_settings_and_its_log_config() -> None:
    import importlib

    command = _container("trisk-worker", "worker")["command"]
    assert command[0] == "arq"
    module, _, attr = command[-1].rpartition(".")
    assert f"{module}.{attr}" == f"{_worker_settings().__module__}.{_worker_settings().__name__}"
    # arq's own logging (its first lines come before the worker's startup) is the service's JSON
    log_module, _, log_attr = command[command.index("--custom-log-dict") + 1].rpartition(".")
    config = getattr(importlib.import_module(log_module), log_attr)
    assert config["formatters"]["trisk"]["()"].endswith("JsonFormatter") or _config()["TRISK_LOG_FORMAT"] != "json"
    assert _config()["TRISK_LOG_FORMAT"] == "json"


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
    assert meta["databaseIndex"] == urlparse(_config()["REDIS_URL"]).path.lstrip("/")
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
    private servers (tests/support/local_redis.py) do."""
    script = (ROOT / "scripts" / "redis.sh").read_text(encoding="utf-8").replace("\\\n", " ")
    (start,) = [ln for ln in script.splitlines() if ln.startswith("redis-server ")]
    started = _options(shlex.split(start))
    for name, value in _options(persistence_args()).items():
        assert started.get(name) == value, f"scripts/redis.sh: --{name} {started.get(name)!r}, not {value!r}"
    # its memory limit: the documented setting, whose default is the cluster's
    assert started.get("maxmemory") == "$maxmemory", started
    (default,) = re.findall(r'^maxmemory="\$\{TRISK_REDIS_MAXMEMORY:-([^}]*)\}"$', script, re.M)
    assert default == RedisSettings.from_env({}).maxmemory == _redis_conf()["maxmemory"], default


# -- rollout, CPU and scaling


def test_worker_rollout_never_mixes_releases() -> None:
    """Recreate: every old worker is gone before a new one starts (k8s/README.md, "Rollout", says why not a queue
    per release). KEDA scales the Deployment, which keeps its strategy."""
    strategy = find(DOCS, "Deployment", "trisk-worker").body["spec"]["strategy"]
    assert strategy == {"type": "Recreate"}


def test_encoder_threads_follow_the_workers_cpu_limit() -> None:
    worker = _container("trisk-worker", "worker")
    ref = _env(worker)["TRISK_EMBEDDING_THREADS"]["valueFrom"]["resourceFieldRef"]
    assert ref == {"containerName": worker["name"], "resource": "limits.cpu", "divisor": "1"}
    limit = worker["resources"]["limits"]["cpu"]
    assert float(limit) >= float(worker["resources"]["requests"]["cpu"]), "a CPU limit below the request"


def test_the_api_scales_with_an_autoscaler_that_owns_its_replicas() -> None:
    hpa = find(DOCS, "HorizontalPodAutoscaler", "trisk-api").body["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "trisk-api"}
    assert "replicas" not in find(DOCS, "Deployment", "trisk-api").body["spec"], "the autoscaler owns the count"
    budget = find(DOCS, "PodDisruptionBudget", "trisk-api").body["spec"]
    assert hpa["minReplicas"] > budget["minAvailable"], "a drain must be able to evict one replica"
    (metric,) = hpa["metrics"]
    assert metric["resource"]["name"] == "cpu" and "cpu" in _container("trisk-api", "api")["resources"]["requests"]


# -- egress: the API reaches no internet, the workers only through a component


def _egress_rules(pod: str) -> list[tuple[Doc, dict[str, Any]]]:
    labels = _pod_labels()[pod]
    out = []
    for doc in (d for d in DOCS if d.kind == "NetworkPolicy"):
        spec = doc.body["spec"]
        if spec["podSelector"] and _labels_match(spec["podSelector"], labels):
            out += [(doc, rule) for rule in spec.get("egress", [])]
    return out


def test_neither_api_nor_workers_reach_the_internet_in_the_base() -> None:
    """Every egress rule of the base names pods of the cluster or the database's own address: an LLM provider,
    callback receivers or anything else outside needs a component (k8s/components/)."""
    for pod in ("trisk-api", "trisk-worker"):
        for doc, rule in _egress_rules(pod):
            for peer in rule["to"]:
                if "ipBlock" in peer:
                    assert [p["port"] for p in rule["ports"]] == [5432], f"{doc}: {peer} on {rule['ports']}"
                    assert peer["ipBlock"]["cidr"].endswith("/32") and "except" not in peer["ipBlock"], doc
                else:
                    assert "podSelector" in peer or "namespaceSelector" in peer, f"{doc}: {peer}"


COMPONENTS = K8S / "components"


def _component(name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    kust = yaml.safe_load((COMPONENTS / name / "kustomization.yaml").read_text(encoding="utf-8"))
    docs = [b for r in kust.get("resources", []) for b in yaml.safe_load_all((COMPONENTS / name / r).read_text()) if b]
    return kust, docs


def test_components_are_valid_and_select_trisk_pods() -> None:
    labels = _pod_labels()
    names = sorted(p.name for p in COMPONENTS.iterdir() if p.is_dir())
    assert names == ["callbacks-egress", "ingress", "llm-egress-cilium", "llm-egress-proxy"]
    for name in names:
        kust, docs = _component(name)
        assert kust["kind"] == "Component", name
        for body in docs:
            if body["apiVersion"].split("/")[0] not in {"cilium.io"}:
                kubernetes_validate.validate(body, MIN_KUBERNETES, strict=True)
            selector = body.get("spec", {}).get("podSelector") or body.get("spec", {}).get("endpointSelector")
            if selector:
                assert any(_labels_match(selector, pod) for pod in labels.values()), f"{name}: selects no pod"


def test_the_callbacks_component_keeps_private_ranges_closed() -> None:
    _, (policy,) = _component("callbacks-egress")
    (rule,) = policy["spec"]["egress"]
    (peer,) = rule["to"]
    assert peer["ipBlock"]["cidr"] == "0.0.0.0/0"
    assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "127.0.0.0/8"} <= set(
        peer["ipBlock"]["except"]
    )
    assert _labels_match(policy["spec"]["podSelector"], _pod_labels()["trisk-worker"])
    assert not _labels_match(policy["spec"]["podSelector"], _pod_labels()["trisk-api"]), "the API makes no callbacks"


def test_the_proxy_component_routes_only_the_workers_through_the_proxy() -> None:
    kust, (policy,) = _component("llm-egress-proxy")
    (patch,) = kust["patches"]
    assert patch["target"] == {"kind": "Deployment", "name": "trisk-worker"}
    ops = yaml.safe_load(patch["patch"])
    env = {op["value"]["name"]: op["value"]["value"] for op in ops}
    proxy = urlparse(env["HTTPS_PROXY"])
    (rule,) = policy["spec"]["egress"]
    assert [p["port"] for p in rule["ports"]] == [proxy.port]
    assert (
        proxy.hostname.split(".")[1] == rule["to"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
    )
    assert "trisk-redis" in env["NO_PROXY"] and ".svc" in env["NO_PROXY"]


def test_the_ingress_sends_tls_traffic_to_the_api_service() -> None:
    _, (ingress,) = _component("ingress")
    (tls,) = ingress["spec"]["tls"]
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] in tls["hosts"] and tls["secretName"]
    backend = rule["http"]["paths"][0]["backend"]["service"]
    service = find(DOCS, "Service", backend["name"])
    assert backend["port"]["name"] in {p["name"] for p in service.body["spec"]["ports"]}
    # the API admits the ingress controller's namespace
    (api_rule,) = find(DOCS, "NetworkPolicy", "trisk-api-ingress").body["spec"]["ingress"]
    assert api_rule["from"][0]["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "ingress-nginx"}


WORKER = ("Deployment", "trisk-worker")


def test_kustomize_renders_the_base_and_every_component(tmp_path: Path) -> None:
    """What `kubectl apply -k` sends: the base, and an overlay with every component (kubectl's built-in kustomize)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed here: its kustomize cannot render (the checks above read the files)")
    base = tmp_path / "k8s"
    shutil.copytree(K8S, base)
    shutil.copy(base / "secrets.env.example", base / "secrets.env")
    res = subprocess.run([kubectl, "kustomize", str(base)], capture_output=True, text=True, check=False, timeout=60)
    assert res.returncode == 0, res.stderr
    rendered = [d for d in yaml.safe_load_all(res.stdout) if d]
    assert sorted((d["kind"], d["metadata"]["name"]) for d in rendered) == sorted(
        [(d.kind, d.name) for d in DOCS] + [("Secret", SECRET)]
    )
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    components = [f"../k8s/components/{p.name}" for p in sorted(COMPONENTS.iterdir()) if p.is_dir()]
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": ["../k8s"], "components": components}), encoding="utf-8"
    )
    res = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True, text=True, check=False, timeout=60)
    assert res.returncode == 0, res.stderr
    worker = next(
        d
        for d in yaml.safe_load_all(res.stdout)
        if d and d["metadata"]["name"] == "trisk-worker" and d["kind"] == "Deployment"
    )
    names = {e["name"] for e in worker["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert {"HTTPS_PROXY", "NO_PROXY"} <= names


# -- the Redis password


def test_redis_takes_its_password_from_a_file_not_its_command_line() -> None:
    sts = find(DOCS, "StatefulSet", "trisk-redis")
    (redis_c,) = pod_spec(sts)["containers"]
    (init,) = pod_spec(sts)["initContainers"]
    assert redis_c["command"] == ["redis-server", "/etc/redis/redis.conf"]
    assert not redis_c.get("env"), "no password in Redis's environment either"
    text = find(DOCS, "ConfigMap", "trisk-redis").body["data"]["redis.conf"]
    (include,) = [ln.split()[1] for ln in text.splitlines() if ln.startswith("include ")]
    assert include in init["command"][-1], "the init container writes the file redis.conf includes"
    mounts = {m["mountPath"]: m["name"] for m in redis_c["volumeMounts"]}
    assert mounts[str(Path(include).parent)] == next(
        m["name"] for m in init["volumeMounts"] if m["mountPath"] == str(Path(include).parent)
    )
    (auth,) = [v for v in pod_spec(sts)["volumes"] if v["name"] == mounts[str(Path(include).parent)]]
    assert auth["emptyDir"]["medium"] == "Memory", "the rendered password stays off the node's disk"
