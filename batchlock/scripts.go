package batchlock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/acquire.lua
	acquireSource string
	//go:embed scripts/release.lua
	releaseSource string
	//go:embed scripts/extend.lua
	extendSource string
	//go:embed scripts/force.lua
	forceSource string

	acquireScript = redis.NewScript(acquireSource)
	releaseScript = redis.NewScript(releaseSource)
	extendScript  = redis.NewScript(extendSource)
	forceScript   = redis.NewScript(forceSource)
)

// Replies of acquire.lua; any other (-1: the hold was cancelled) leaves the
// group's outcome unknown.
const (
	acquireGranted = 1
	acquireRefused = 0
)
