package pgserver

import (
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStartServesAndCloseRemoves(t *testing.T) {
	s, err := Start(t.Context())
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no PostgreSQL (CI=true, so this fails): %v", err)
		}
		t.Skipf("SKIPPED, no PostgreSQL: %v", err)
	}
	url, err := s.CreateDatabase(t.Context(), "smoke")
	require.NoError(t, err)
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	var db string
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT current_database()").Scan(&db))
	assert.Equal(t, "smoke", db)
	require.NoError(t, conn.Close(t.Context()))

	pid := s.cmd.Process.Pid
	require.NoError(t, s.Close())
	assert.NoDirExists(t, s.dir)
	assert.Error(t, exec.Command("kill", "-0", strconv.Itoa(pid)).Run(), "the server process is gone")
}
