#!/usr/bin/env bash
# Installs what the tests need and the machine may lack: redis-server and
# redis-cli, from Debian's packages. It downloads nothing else. Not root, or
# no apt-get: it says what to install and fails.
set -euo pipefail

# Silent when everything is there, so that make demo starts with the demo.
if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
	exit 0
fi

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "install-deps: redis-server is missing; install it with:" >&2
	echo "    sudo apt-get update && sudo apt-get install -y redis-server redis-tools" >&2
	exit 1
fi

echo "install-deps: apt-get install -y redis-server redis-tools"
# Keep the package from starting its own server on 6379: the tests start
# theirs. policy-rc.d is Debian's switch for that during an install.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod +x "$policy"
	trap 'rm -f "$policy"' EXIT
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq redis-server redis-tools >/dev/null
if ! command -v redis-server >/dev/null 2>&1; then
	echo "install-deps: redis-server still not on PATH after apt-get install" >&2
	exit 1
fi
echo "install-deps: $(redis-server --version | cut -d' ' -f1-3) installed"
