#!/usr/bin/env bash
# Builds batchlock/redis:7-local (or the tag given as $1) from the host's
# redis-server: no registry is needed. The build context is rootfs/ with
# usr/local/bin/redis-server and every library ldd lists, at the same paths,
# plus docker/Dockerfile. localcluster assembles the same context in memory
# when it needs the image and finds it missing.
set -euo pipefail

tag=${1:-batchlock/redis:7-local}
here=$(cd "$(dirname "$0")" && pwd)
bin=$(command -v redis-server) || {
	echo "build-image: redis-server not found; run scripts/install-deps.sh" >&2
	exit 1
}

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT

# redis-server is often a link to redis-check-rdb, which picks its mode from
# argv[0]: copy the target under the name redis-server.
mkdir -p "$ctx/rootfs/usr/local/bin"
cp -L "$bin" "$ctx/rootfs/usr/local/bin/redis-server"

# "libx.so => /path (addr)" or "/lib64/ld-linux... (addr)"; vdso has no file.
ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' |
	while read -r lib; do
		mkdir -p "$ctx/rootfs$(dirname "$lib")"
		cp -L "$lib" "$ctx/rootfs$lib"
	done

cp "$here/Dockerfile" "$ctx/Dockerfile"
docker build --quiet -t "$tag" "$ctx" >/dev/null
echo "build-image: built $tag from $bin"
