package batchlock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// Every script is the shebang that lets it touch the keys of every slot its
// master serves (one declared key routes the call; the others come as
// arguments), then layout.lua, the one definition of a lock key's value,
// then its own body: for the acquiring scripts, attempt.lua (one hold's
// attempt) and their main part.
const shebang = "#!lua flags=allow-cross-slot-keys\n"

var (
	//go:embed scripts/layout.lua
	layoutSource string
	//go:embed scripts/attempt.lua
	attemptSource string
	//go:embed scripts/acquire.lua
	acquireSource string
	//go:embed scripts/tryeach.lua
	tryEachSource string
	//go:embed scripts/release.lua
	releaseSource string
	//go:embed scripts/extend.lua
	extendSource string
	//go:embed scripts/force.lua
	forceSource string

	acquireScript = newScript(attemptSource + acquireSource)
	tryEachScript = newScript(attemptSource + tryEachSource)
	releaseScript = newScript(releaseSource)
	extendScript  = newScript(extendSource)
	forceScript   = newScript(forceSource)
)

func newScript(body string) *redis.Script {
	return redis.NewScript(shebang + layoutSource + body)
}
