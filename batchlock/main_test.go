package batchlock

import (
	"testing"

	"github.com/batchlock/batchlock/internal/wire/wiretest"
)

func TestMain(m *testing.M) { wiretest.Main(m) }
