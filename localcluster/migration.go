package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

const (
	// migrateBatch is how many keys one MIGRATE moves in batches.
	migrateBatch = 100
	// migrateTimeout is MIGRATE's own bound, in milliseconds, on its
	// exchange with the target.
	migrateTimeout = 5000
)

// Migration is a slot migration under way, begun by
// [Cluster.BeginMigration], for tests that need the half-way state: the
// target imports the slot (SETSLOT IMPORTING) and the source, still its
// owner, migrates it (SETSLOT MIGRATING). Meanwhile the source serves the
// keys it still holds and answers ASK for any other key of the slot, moved
// or new, and the target serves those after ASKING, so a client that
// follows ASK (go-redis' ClusterClient does) reaches every key; a command
// on several keys of the slot, some moved and some not, gets TRYAGAIN.
// Keys move with MIGRATE, values and TTLs unchanged; batchlock's lock
// keys and fencing counters of the slot are keys like any other. End a
// migration with Finish or Abort. Its methods are safe for concurrent
// use and run one at a time.
type Migration struct {
	c          *Cluster
	slot       int
	src, dst   Node
	host, port string // dst's, for MIGRATE

	mu    sync.Mutex
	back  *Migration // the migration back to the source, once Abort began it
	ended bool       // by Finish or Abort
}

var errMigrationEnded = errors.New("localcluster: migration already finished or aborted")

// MigrateSlot moves slot and its keys to the master at toAddr the way
// redis-cli does (SETSLOT IMPORTING and MIGRATING, MIGRATE in batches,
// SETSLOT NODE on every master) and returns once every answering node
// sees toAddr serving it: [Cluster.BeginMigration] then
// [Migration.Finish]. It does nothing when toAddr already serves slot.
// Works on every backend. Without a deadline on ctx it gives up after a
// minute.
func (c *Cluster) MigrateSlot(ctx context.Context, slot int, toAddr string) error {
	ctx, cancel := defaultTimeout(ctx, waitTimeout)
	defer cancel()
	m, err := c.beginMigration(ctx, slot, toAddr)
	if err != nil || m == nil {
		return err
	}
	return m.Finish(ctx)
}

// BeginMigration opens the migration of slot to the master at toAddr:
// SETSLOT IMPORTING on the target, then SETSLOT MIGRATING on the source,
// the order redis-cli uses, so that the source never sends ASK to a
// target that would refuse it. No key moves yet. It returns an error when
// toAddr is not a master or already serves slot. Works on every backend.
// Without a deadline on ctx it gives up after a minute.
func (c *Cluster) BeginMigration(ctx context.Context, slot int, toAddr string) (*Migration, error) {
	ctx, cancel := defaultTimeout(ctx, waitTimeout)
	defer cancel()
	m, err := c.beginMigration(ctx, slot, toAddr)
	if err == nil && m == nil {
		err = fmt.Errorf("localcluster: %s already serves slot %d", toAddr, slot)
	}
	return m, err
}

// beginMigration is BeginMigration, returning nil and no error when
// toAddr already serves slot.
func (c *Cluster) beginMigration(ctx context.Context, slot int, toAddr string) (*Migration, error) {
	if slot < 0 || slot >= SlotCount {
		return nil, fmt.Errorf("localcluster: slot %d out of range", slot)
	}
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	m := &Migration{c: c, slot: slot}
	for _, n := range nodes {
		if n.Master && n.ServesSlot(slot) {
			m.src = n
		}
		if n.Addr == toAddr {
			m.dst = n
		}
	}
	switch {
	case m.src.ID == "":
		return nil, fmt.Errorf("localcluster: no master serves slot %d", slot)
	case m.dst.ID == "" || !m.dst.Master:
		return nil, fmt.Errorf("localcluster: %s is not a master of the cluster", toAddr)
	case m.src.ID == m.dst.ID:
		return nil, nil
	}
	if m.host, m.port, err = net.SplitHostPort(m.dst.Addr); err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	if _, err := c.Do(ctx, m.dst.Addr, "CLUSTER", "SETSLOT", slot, "IMPORTING", m.src.ID); err != nil {
		return nil, err
	}
	if _, err := c.Do(ctx, m.src.Addr, "CLUSTER", "SETSLOT", slot, "MIGRATING", m.dst.ID); err != nil {
		_, undo := c.Do(context.WithoutCancel(ctx), m.dst.Addr, "CLUSTER", "SETSLOT", slot, "STABLE")
		return nil, errors.Join(err, undo)
	}
	c.logf("localcluster: migrating slot %d from %s to %s", slot, m.src.Addr, m.dst.Addr)
	return m, nil
}

// Slot returns the slot being migrated.
func (m *Migration) Slot() int { return m.slot }

// From returns the source master, as it was when the migration began.
func (m *Migration) From() Node { return m.src }

// To returns the target master, as it was when the migration began.
func (m *Migration) To() Node { return m.dst }

// usable refuses calls once Finish or Abort has succeeded or Abort began.
func (m *Migration) usable() error {
	switch {
	case m.ended:
		return errMigrationEnded
	case m.back != nil:
		return errors.New("localcluster: migration being aborted; call Abort again")
	}
	return nil
}

// Move moves exactly the given keys of the slot to the target, in one
// MIGRATE ... KEYS call on the source. Keys not on the source (moved
// already, or never written) are skipped; a key of another slot is an
// error, and then nothing moves. Without a deadline on ctx it gives up
// after a minute.
func (m *Migration) Move(ctx context.Context, keys ...string) error {
	args := make([]any, len(keys))
	for i, k := range keys {
		if s := keySlot(k); s != m.slot {
			return fmt.Errorf("localcluster: key %q is in slot %d, not in slot %d", k, s, m.slot)
		}
		args[i] = k
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.usable(); err != nil {
		return err
	}
	if len(keys) == 0 {
		return nil
	}
	ctx, cancel := defaultTimeout(ctx, waitTimeout)
	defer cancel()
	return m.migrate(ctx, args)
}

// MoveAll moves every key still on the source to the target. With pause
// > 0 it moves them one per MIGRATE, waiting pause between two, so a test
// can watch keys leave one at a time; otherwise it moves them in batches
// of 100 with no wait, as MigrateSlot does. Keys created meanwhile go to
// the target already (the source answers ASK for them). The slot stays
// open: Finish assigns it. Without a deadline on ctx it gives up after a
// minute plus pause for each key on the source when it is called.
func (m *Migration) MoveAll(ctx context.Context, pause time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.usable(); err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok && pause > 0 {
		n, err := m.c.Do(ctx, m.src.Addr, "CLUSTER", "COUNTKEYSINSLOT", m.slot)
		if err != nil {
			return err
		}
		count, _ := n.(int64)
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, waitTimeout+time.Duration(count)*pause)
		defer cancel()
	}
	ctx, cancel := defaultTimeout(ctx, waitTimeout)
	defer cancel()
	return m.moveRest(ctx, pause)
}

func (m *Migration) moveRest(ctx context.Context, pause time.Duration) error {
	batch := migrateBatch
	if pause > 0 {
		batch = 1
	}
	for first := true; ; first = false {
		reply, err := m.c.Do(ctx, m.src.Addr, "CLUSTER", "GETKEYSINSLOT", m.slot, batch)
		if err != nil {
			return err
		}
		keys, _ := reply.([]any)
		if len(keys) == 0 {
			return nil
		}
		if !first && pause > 0 {
			select {
			case <-time.After(pause):
			case <-ctx.Done():
				return fmt.Errorf("localcluster: moving slot %d: %w", m.slot, ctx.Err())
			}
		}
		if err := m.migrate(ctx, keys); err != nil {
			return err
		}
	}
}

// migrate sends one MIGRATE of keys from the source to the target. A
// reply of NOKEY (none of them on the source) is not an error.
func (m *Migration) migrate(ctx context.Context, keys []any) error {
	args := append([]any{"MIGRATE", m.host, m.port, "", 0, migrateTimeout, "REPLACE", "KEYS"}, keys...)
	_, err := m.c.Do(ctx, m.src.Addr, args...)
	return err
}

// Finish moves the keys left on the source, then assigns the slot to the
// target with SETSLOT NODE on every master: the target first, then the
// source, then the others, as redis-cli does, since the target must own
// the slot before the source stops redirecting to it. That ends the
// IMPORTING and MIGRATING states. It returns once every answering node
// sees the target serving the slot. Without a deadline on ctx it gives up
// after a minute.
func (m *Migration) Finish(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.usable(); err != nil {
		return err
	}
	ctx, cancel := defaultTimeout(ctx, waitTimeout)
	defer cancel()
	if err := m.finish(ctx); err != nil {
		return err
	}
	m.ended = true
	return nil
}

func (m *Migration) finish(ctx context.Context) error {
	if err := m.moveRest(ctx, 0); err != nil {
		return err
	}
	nodes, err := m.c.Nodes(ctx)
	if err != nil {
		return err
	}
	order := []string{m.dst.Addr, m.src.Addr}
	for _, n := range nodes {
		if n.Master && n.ID != m.src.ID && n.ID != m.dst.ID && n.Connected {
			order = append(order, n.Addr)
		}
	}
	for _, addr := range order {
		if _, err := m.c.Do(ctx, addr, "CLUSTER", "SETSLOT", m.slot, "NODE", m.dst.ID); err != nil {
			return err
		}
	}
	return waitFor(ctx, fmt.Sprintf("slot %d moving to %s", m.slot, m.dst.Addr), func(ctx context.Context) error {
		s := m.c.snapshot(ctx)
		if len(s.views) == 0 {
			return errors.New("no node answering")
		}
		for _, v := range s.views {
			for _, e := range v.entries {
				if e.ServesSlot(m.slot) != (e.ID == m.dst.ID) {
					return fmt.Errorf("%s still sees %s serving slot %d", v.addr, e.Addr, m.slot)
				}
			}
		}
		return nil
	})
}

// Abort puts the slot back as it was before BeginMigration: served by
// the source, stable on both masters (no IMPORTING or MIGRATING state
// left), with every key of the slot on the source, the moved ones and
// those written to the target meanwhile included.
//
// Redis 7.0 cannot send keys straight back while the source migrates the
// slot: the source answers the MIGRATE's RESTORE-ASKING with ASK for any
// key it lacks. Making the source STABLE first would let it answer
// "no such key" for keys still on the target, and let clients create them
// anew there, until they are back. So Abort finishes the migration and
// migrates the slot back the same way: every key stays reachable through
// MOVED and ASK all along, at the cost of moving the unmoved keys twice
// and the target serving the slot in between. If Abort fails, call it
// again to go on from where it stopped. It returns once every answering
// node sees the source serving the slot. Without a deadline on ctx it
// gives up after a minute.
func (m *Migration) Abort(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ended {
		return errMigrationEnded
	}
	ctx, cancel := defaultTimeout(ctx, waitTimeout)
	defer cancel()
	if m.back == nil {
		if err := m.finish(ctx); err != nil {
			return fmt.Errorf("localcluster: aborting the migration of slot %d: %w", m.slot, err)
		}
		back, err := m.c.beginMigration(ctx, m.slot, m.src.Addr)
		if err != nil {
			return fmt.Errorf("localcluster: aborting the migration of slot %d: %w", m.slot, err)
		}
		if back == nil { // the source serves it again: someone moved it back
			m.ended = true
			return nil
		}
		m.back = back
	}
	if err := m.back.Finish(ctx); err != nil {
		return fmt.Errorf("localcluster: aborting the migration of slot %d: %w", m.slot, err)
	}
	m.ended = true
	return nil
}

// keySlot is the Redis Cluster slot of key: CRC16 (XMODEM) of its hash
// tag, the part between its first "{" and the next "}" when not empty,
// else of the whole key, modulo 16384.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key)) % SlotCount
}

func crc16(s string) uint16 {
	var crc uint16
	for i := range len(s) {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
