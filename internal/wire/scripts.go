package wire

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// Every script is the Shebang that lets it touch the keys of every slot its
// master serves (one declared key routes the call; the others come as
// arguments), then layout.lua, the one definition of a lock key's value,
// then its own body: for the acquiring scripts, attempt.lua (one hold's
// attempt) and their main part; for release.lua and extend.lua, which
// serve several locks a call, keylists.lua (their reply) and their main
// part.
const Shebang = "#!lua flags=allow-cross-slot-keys\n"

var (
	//go:embed scripts/layout.lua
	LayoutSource string
	//go:embed scripts/attempt.lua
	attemptSource string
	//go:embed scripts/acquire.lua
	AcquireSource string
	//go:embed scripts/tryeach.lua
	tryEachSource string
	//go:embed scripts/keylists.lua
	keyListsSource string
	//go:embed scripts/release.lua
	ReleaseSource string
	//go:embed scripts/extend.lua
	extendSource string
	//go:embed scripts/force.lua
	forceSource string
	//go:embed scripts/capacity.lua
	capacitySource string

	AcquireScript  = newScript(attemptSource + AcquireSource)
	TryEachScript  = newScript(attemptSource + tryEachSource)
	ReleaseScript  = newScript(keyListsSource + ReleaseSource)
	ExtendScript   = newScript(keyListsSource + extendSource)
	ForceScript    = newScript(forceSource)
	CapacityScript = newScript(capacitySource)
)

func newScript(body string) *redis.Script {
	return redis.NewScript(Shebang + LayoutSource + body)
}

// Modes of an acquire (ARGV[4] of acquire.lua): every key of a call or
// none, or the keys up to the first refused one and a place in its queue,
// for a waiter that listens for its hand-off or for one that polls.
const (
	ModeTry  = "try"
	ModeWait = "wait"
	ModePoll = "poll"
	// ModeFirst is TryEach's: as ModeTry, stopping at the first conflict;
	// ModeFresh the same for owners made by the call, which hold nothing.
	ModeFirst = "first"
	ModeFresh = "fresh"
)
