package localcluster

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

const (
	// OfficialImage is used when it is already present: it is never pulled.
	OfficialImage = "redis:7.0"
	// LocalImage is built from the host's redis-server when no other
	// image is present, and reused afterwards.
	LocalImage = "batchlock/redis:7-local"

	imageWorkDir = "/data" // writable, holds nodes.conf in both images
)

// dockerfile must stay equal to docker/Dockerfile (a test checks). Its
// context holds rootfs/: usr/local/bin/redis-server and every library ldd
// lists, at the paths ldd prints.
const dockerfile = `# The host's redis-server and the libraries it links, nothing else: no
# registry is reachable, so nothing is pulled and there is no shell.
# Build context: rootfs/usr/local/bin/redis-server plus each library that
# ldd lists, copied to rootfs/ at the same path (docker/build-image.sh).
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/bin
WORKDIR /data
CMD ["redis-server", "--bind", "127.0.0.1", "--protected-mode", "no"]
`

// ensureImage returns the image to run nodes from, building LocalImage
// when neither it nor OfficialImage is present.
func ensureImage(ctx context.Context, cli *testcontainers.DockerClient, cfg config) (string, error) {
	if cfg.image != "" {
		return cfg.image, nil
	}
	if cfg.server.fromTrixie() {
		return ensureTrixieImage(ctx, cli, cfg)
	}
	for _, ref := range []string{OfficialImage, LocalImage} {
		if _, err := cli.ImageInspect(ctx, ref); err == nil {
			return ref, nil
		}
	}
	cfg.logf("localcluster: building %s from the host's redis-server", LocalImage)
	buildCtx, err := imageContext(ctx)
	if err != nil {
		return "", err
	}
	repo, tag, _ := strings.Cut(LocalImage, ":")
	req := testcontainers.ContainerRequest{FromDockerfile: testcontainers.FromDockerfile{
		ContextArchive: buildCtx,
		Repo:           repo,
		Tag:            tag,
		KeepImage:      true,
	}}
	p, err := testcontainers.NewDockerProvider(testcontainers.WithLogger(logfLogger(cfg.logf)))
	if err != nil {
		return "", fmt.Errorf("localcluster: build %s: %w", LocalImage, err)
	}
	defer p.Close()
	if _, err := p.BuildImage(ctx, &req); err != nil {
		return "", fmt.Errorf("localcluster: build %s: %w", LocalImage, err)
	}
	return LocalImage, nil
}

// imageContext assembles the build context in memory: the Dockerfile, the
// host's redis-server and the libraries it links.
func imageContext(ctx context.Context) (io.ReadSeeker, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("%w (docker backend: no image, and no redis-server on the host to build %s from)", ErrNoBackend, LocalImage)
	}
	// redis-server is often a link to redis-check-rdb, which picks its mode
	// from argv[0]: copy the target under the name redis-server.
	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	out, err := exec.CommandContext(ctx, "ldd", real).Output()
	if err != nil && len(out) == 0 {
		return nil, fmt.Errorf("localcluster: ldd %s: %w", real, err)
	}
	libs, err := parseLdd(string(out))
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile))}); err != nil {
		return nil, err
	}
	if _, err := tw.Write([]byte(dockerfile)); err != nil {
		return nil, err
	}
	files := map[string]string{"rootfs/usr/local/bin/redis-server": real}
	for _, lib := range libs {
		files[path.Join("rootfs", lib)] = lib
	}
	for name, src := range files {
		if err := addFile(tw, name, src); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return bytes.NewReader(buf.Bytes()), nil
}

// addFile writes src's content (following links) as name.
func addFile(tw *tar.Writer, name, src string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("localcluster: %w", err)
	}
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(b))}); err != nil {
		return err
	}
	_, err = tw.Write(b)
	return err
}

// parseLdd returns the absolute paths of the libraries in ldd's output,
// the dynamic loader included. A statically linked binary has none.
func parseLdd(out string) ([]string, error) {
	var libs []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.Contains(line, "not a dynamic executable") || strings.Contains(line, "statically linked") {
			return nil, nil
		}
		if strings.Contains(line, "=> not found") {
			return nil, fmt.Errorf("localcluster: redis-server needs a missing library: %s", line)
		}
		if _, after, ok := strings.Cut(line, "=> "); ok {
			line = after
		}
		p, _, _ := strings.Cut(line, " (")
		if strings.HasPrefix(p, "/") {
			libs = append(libs, p)
		}
	}
	return libs, sc.Err()
}

// ensureTrixieImage returns TrixieImage, imported from the trixie tree's
// archive when missing.
func ensureTrixieImage(ctx context.Context, cli *testcontainers.DockerClient, cfg config) (string, error) {
	if _, err := cli.ImageInspect(ctx, TrixieImage); err == nil {
		return TrixieImage, nil
	}
	archive, _, err := trixieServer(ctx, cfg.server, cfg.logf)
	if err != nil {
		return "", err
	}
	f, err := os.Open(archive)
	if err != nil {
		return "", fmt.Errorf("localcluster: %w", err)
	}
	defer f.Close()
	cfg.logf("localcluster: importing %s from %s", TrixieImage, archive)
	res, err := cli.ImageImport(ctx, client.ImageImportSource{Source: f, SourceName: "-"}, TrixieImage,
		client.ImageImportOptions{Changes: []string{"WORKDIR " + imageWorkDir}})
	if err != nil {
		return "", fmt.Errorf("localcluster: import %s: %w", TrixieImage, err)
	}
	_, err = io.Copy(io.Discard, res)
	if err = errors.Join(err, res.Close()); err != nil {
		return "", fmt.Errorf("localcluster: import %s: %w", TrixieImage, err)
	}
	if _, err := cli.ImageInspect(ctx, TrixieImage); err != nil {
		return "", fmt.Errorf("localcluster: import %s: %w", TrixieImage, err)
	}
	return TrixieImage, nil
}
