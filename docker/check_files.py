#!/usr/bin/env python3
"""Checks docker/ with the tools a machine without a Docker engine has: both
compose files parse and describe a server and a client of the rdv image
with what their form needs (host network: NET_ADMIN and an rxe device of
its own; bridge: one uverbs device, no privileges, reached at its own
address; both: TLS and a token); the Dockerfile builds with the project's own set-up and build
scripts; the scripts are valid bash. tests/docker runs them for real.

usage: check_files.py DOCKER_DIR"""
import os
import re
import subprocess
import sys

import yaml

docker = sys.argv[1]
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def services_of(name):
    compose = yaml.safe_load(open(os.path.join(docker, name)))
    services = compose.get("services", {})
    check(set(services) == {"server", "client"}, f"{name}: services {sorted(services)}")
    for role, service in services.items():
        check(service.get("image") == "rdv", f"{name}: {role} image")
        check(service.get("command") == role, f"{name}: {role} command")
        check(service.get("ulimits", {}).get("memlock") == -1, f"{name}: {role} memlock")
        check("RDV_LISTEN_HOST" in service.get("environment", {}), f"{name}: {role} listen host")
        check({"RDV_TLS_CERT", "RDV_TLS_KEY", "RDV_TLS_CA", "RDV_CLUSTER_TOKEN_FILE"}
              <= set(service.get("environment", {})),
              f"{name}: {role} does not pass the door (TLS and a token, docs/security.md)")
    client = services.get("client", {})
    check(client.get("depends_on") == ["server"], f"{name}: client order")
    check("RDV_SERVER_HOST" in client.get("environment", {}), f"{name}: client has no server")
    build = services.get("server", {}).get("build", {})
    check(build.get("dockerfile") == "docker/Dockerfile", f"{name}: server build {build}")
    return compose, services


# Form (a): the host's network, each container adds its own rxe device.
_, services = services_of("docker-compose.host-network.yml")
for role, service in services.items():
    check(service.get("network_mode") == "host", f"host-network: {role} network")
    check("NET_ADMIN" in service.get("cap_add", []), f"host-network: {role} lacks NET_ADMIN")
    check(str(service.get("environment", {}).get("RDV_ADD_RXE")) == "1",
          f"host-network: {role} does not add an rxe device")
    check("/dev/infiniband:/dev/infiniband" in service.get("volumes", []),
          f"host-network: {role} does not see new uverbs nodes")

# Form (b): a bridge network, one uverbs device each, no privileges.
compose, services = services_of("docker-compose.yml")
check(compose.get("networks", {}).get("rdma", {}).get("driver") == "bridge", "bridge: network")
for role, service in services.items():
    check(not service.get("privileged") and not service.get("cap_add"),
          f"bridge: {role} has privileges")
    devices = service.get("devices", [])
    check(len(devices) == 1 and "/dev/infiniband/" in devices[0], f"bridge: {role} devices")
    address = service.get("networks", {}).get("rdma", {}).get("ipv4_address")
    environment = service.get("environment", {})
    check(address is not None and environment.get("RDV_IB_CONNECT_ADDRESS") == address
          and environment.get("RDV_LISTEN_HOST") == address,
          f"bridge: {role} is not reached at its own address")

dockerfile = open(os.path.join(docker, "Dockerfile")).read()
check(re.search(r"^FROM debian:bookworm AS build$", dockerfile, re.M) is not None,
      "Dockerfile: build stage")
run = re.search(r"^RUN (.*?)(?<!\\)$", dockerfile, re.M | re.S)
check(run is not None and run.group(1).startswith("scripts/setup && scripts/build release"),
      "Dockerfile: the build stage is not the set-up script then the release build")
check("docker/runtime-packages" in dockerfile, "Dockerfile: run-time packages")
for script in ("scripts/setup", "scripts/build"):
    check(os.access(os.path.join(docker, "..", script), os.X_OK), f"{script} is not executable")
for script in ("entrypoint.sh", "build-image"):
    path = os.path.join(docker, script)
    check(os.access(path, os.X_OK), f"{script} is not executable")
    check(subprocess.run(["bash", "-n", path]).returncode == 0, f"{script}: bash -n")
sys.exit(1 if failures else 0)
