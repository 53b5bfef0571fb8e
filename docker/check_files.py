#!/usr/bin/env python3
"""Checks docker/ with the tools a machine without a Docker engine has: both
compose files parse and describe a server and a client of the rdv image
with what SoftRoCE needs; the Dockerfile builds with the project's own
set-up and build scripts; the entry point is valid bash.

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


for name in ("docker-compose.yml", "docker-compose.host-network.yml"):
    compose = yaml.safe_load(open(os.path.join(docker, name)))
    services = compose.get("services", {})
    check(set(services) == {"server", "client"}, f"{name}: services {sorted(services)}")
    for role, service in services.items():
        check(service.get("image") == "rdv", f"{name}: {role} image")
        check(service.get("command") == role, f"{name}: {role} command")
        check("NET_ADMIN" in service.get("cap_add", []), f"{name}: {role} lacks NET_ADMIN")
        check(service.get("ulimits", {}).get("memlock") == -1, f"{name}: {role} memlock")
        check(str(service.get("environment", {}).get("RDV_ADD_RXE")) == "1",
              f"{name}: {role} does not add an rxe device")
    check(services.get("client", {}).get("depends_on") == ["server"], f"{name}: client order")
    check("RDV_SERVER" in services.get("client", {}).get("environment", {}),
          f"{name}: client has no RDV_SERVER")
    build = services.get("server", {}).get("build", {})
    check(build.get("dockerfile") == "docker/Dockerfile", f"{name}: server build {build}")

dockerfile = open(os.path.join(docker, "Dockerfile")).read()
check(re.search(r"^FROM debian:bookworm$", dockerfile, re.M) is not None, "Dockerfile: base")
run = re.search(r"^RUN (.*?)(?<!\\)$", dockerfile, re.M | re.S)
check(run is not None and run.group(1).startswith("scripts/setup && scripts/build release"),
      "Dockerfile: RUN is not the set-up script then the release build")
for script in ("scripts/setup", "scripts/build"):
    check(os.access(os.path.join(docker, "..", script), os.X_OK), f"{script} is not executable")
entrypoint = os.path.join(docker, "entrypoint.sh")
check(os.access(entrypoint, os.X_OK), "entrypoint.sh is not executable")
check(subprocess.run(["bash", "-n", entrypoint]).returncode == 0, "entrypoint.sh: bash -n")
sys.exit(1 if failures else 0)
