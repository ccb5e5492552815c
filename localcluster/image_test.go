package localcluster

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDockerfileMatchesRepo(t *testing.T) {
	b, err := os.ReadFile("../docker/Dockerfile")
	require.NoError(t, err)
	assert.Equal(t, string(b), dockerfile, "docker/Dockerfile and the image localcluster builds must match")
}

func TestParseLdd(t *testing.T) {
	out := `	linux-vdso.so.1 (0x00007ffd)
	libm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x00007f11)
	libssl.so.3 => /lib/x86_64-linux-gnu/libssl.so.3 (0x00007f12)
	/lib64/ld-linux-x86-64.so.2 (0x00007f13)
`
	libs, err := parseLdd(out)
	require.NoError(t, err)
	assert.Equal(t, []string{"/lib/x86_64-linux-gnu/libm.so.6", "/lib/x86_64-linux-gnu/libssl.so.3", "/lib64/ld-linux-x86-64.so.2"}, libs)

	libs, err = parseLdd("\tnot a dynamic executable\n")
	require.NoError(t, err)
	assert.Empty(t, libs)

	_, err = parseLdd("\tlibfoo.so.1 => not found\n")
	assert.ErrorContains(t, err, "libfoo")
}
