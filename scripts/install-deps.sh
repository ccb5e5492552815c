#!/usr/bin/env bash
# Installs what the tests need and the machine may lack: redis-server and
# redis-cli, the PostgreSQL server (initdb, postgres), and mmdebstrap (which
# localcluster runs once to build Debian 13's Valkey and Redis 8 servers),
# from Debian's packages. It downloads nothing else. Not root, or no apt-get: it says
# what to install and fails.
set -euo pipefail

# The PostgreSQL server binaries: on PATH, or in Debian's versioned
# directories (which are not on PATH).
have_postgres() {
	command -v initdb >/dev/null 2>&1 && return 0
	compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null
}

missing=()
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
	missing+=(redis-server redis-tools)
fi
if ! have_postgres; then
	missing+=(postgresql)
fi
if ! command -v mmdebstrap >/dev/null 2>&1; then
	missing+=(mmdebstrap)
fi
# Silent when everything is there, so that make demo starts with the demo.
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "install-deps: missing ${missing[*]}; install with:" >&2
	echo "    sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
	exit 1
fi

echo "install-deps: apt-get install -y ${missing[*]}"
# Keep the packages from starting their own servers (redis on 6379,
# PostgreSQL's main cluster on 5432): the tests start theirs. policy-rc.d is
# Debian's switch for that during an install.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod +x "$policy"
	trap 'rm -f "$policy"' EXIT
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
if ! command -v redis-server >/dev/null 2>&1; then
	echo "install-deps: redis-server still not on PATH after apt-get install" >&2
	exit 1
fi
if ! have_postgres; then
	echo "install-deps: no initdb in /usr/lib/postgresql/*/bin after apt-get install postgresql" >&2
	exit 1
fi
dpkg-query -W -f='install-deps: ${Package} ${Version} installed\n' "${missing[@]}"
