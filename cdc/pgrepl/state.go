package pgrepl

import (
	"context"
	"slices"
	"sync"
)

// State is what the source records outside the source database: its
// initial loads, by slot, and the slots and publications it created, so
// that a crashed load resumes, a finished one is not redone, and `slot
// drop` removes only what ragsync made. sink.SourceState keeps it in the
// index database.
type State interface {
	// Load returns slot's load record (zero when none).
	Load(ctx context.Context, slot string) (LoadRecord, error)
	// SaveLoad records it; ForgetLoad deletes it, so a new slot of the
	// same name loads everything again.
	SaveLoad(ctx context.Context, slot string, r LoadRecord) error
	ForgetLoad(ctx context.Context, slot string) error
	// Created reports whether ragsync created the object of kind
	// ("slot" or "publication") and name in database; RecordCreated and
	// ForgetCreated record and forget that.
	Created(ctx context.Context, kind, database, name string) (bool, error)
	RecordCreated(ctx context.Context, kind, database, name string) error
	ForgetCreated(ctx context.Context, kind, database, name string) error
	// RecordStream records that slot, in database, streams publication
	// (at every start); ForgetStream forgets it. Streams returns the
	// records of database: this deployment's, and those of every other
	// deployment the state can see, so a drop can tell whether another
	// slot still streams from a publication.
	RecordStream(ctx context.Context, database, slot, publication string) error
	ForgetStream(ctx context.Context, database, slot string) error
	Streams(ctx context.Context, database string) ([]Stream, error)
}

// Stream is a slot and the publication it streams.
type Stream struct{ Slot, Publication string }

// Object kinds of State.Created.
const (
	KindSlot        = "slot"
	KindPublication = "publication"
)

// LoadRecord is what a slot's initial loads covered. Tables are named as
// cdc.TableName writes them.
type LoadRecord struct {
	// Exists is false for a slot nothing was recorded for.
	Exists bool
	// Loaded are the tables whose load finished. Nil with Exists means a
	// load recorded before tables were listed: every table was loaded.
	Loaded []string
	// Pending are the tables of the load in progress, in the order
	// Postgres listed them when it began (empty: none in progress). Every
	// row of the pending tables before Table, and of Table up to primary
	// key Key (the key columns' text), is in the sink.
	Pending []string
	Table   string
	Key     []string
	// Fenced says the load in progress reads one snapshot from its start
	// (the slot's exported one, or one taken when it began and not
	// resumed since), so when it finishes every document of its tables
	// that it did not write is gone from the source.
	Fenced bool
	// Source is the identity of the database the slot's loads read
	// (cdc.PostgresSource); empty on a record written before it was kept.
	Source string
	// Succeeds are the identities this source replaced by adopted moves:
	// a load's reconcile treats their documents as its own, older ones.
	Succeeds []string
}

func (r LoadRecord) clone() LoadRecord {
	r.Loaded, r.Pending, r.Key, r.Succeeds = slices.Clone(r.Loaded), slices.Clone(r.Pending), slices.Clone(r.Key), slices.Clone(r.Succeeds)
	return r
}

// MemoryState is a State that forgets everything when the process ends.
type MemoryState struct {
	mu      sync.Mutex
	loads   map[string]LoadRecord
	created map[[3]string]bool
	streams map[[2]string]string
}

// NewMemoryState returns an empty MemoryState.
func NewMemoryState() *MemoryState {
	return &MemoryState{loads: map[string]LoadRecord{}, created: map[[3]string]bool{}, streams: map[[2]string]string{}}
}

// Load implements State.
func (m *MemoryState) Load(_ context.Context, slot string) (LoadRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.loads[slot].clone(), nil
}

// SaveLoad implements State.
func (m *MemoryState) SaveLoad(_ context.Context, slot string, r LoadRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r.Exists = true
	m.loads[slot] = r.clone()
	return nil
}

// ForgetLoad implements State.
func (m *MemoryState) ForgetLoad(_ context.Context, slot string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.loads, slot)
	return nil
}

// Created implements State.
func (m *MemoryState) Created(_ context.Context, kind, database, name string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.created[[3]string{kind, database, name}], nil
}

// RecordCreated implements State.
func (m *MemoryState) RecordCreated(_ context.Context, kind, database, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.created[[3]string{kind, database, name}] = true
	return nil
}

// ForgetCreated implements State.
func (m *MemoryState) ForgetCreated(_ context.Context, kind, database, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.created, [3]string{kind, database, name})
	return nil
}

// RecordStream implements State.
func (m *MemoryState) RecordStream(_ context.Context, database, slot, publication string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.streams[[2]string{database, slot}] = publication
	return nil
}

// ForgetStream implements State.
func (m *MemoryState) ForgetStream(_ context.Context, database, slot string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.streams, [2]string{database, slot})
	return nil
}

// Streams implements State: only the records of this MemoryState.
func (m *MemoryState) Streams(_ context.Context, database string) ([]Stream, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Stream
	for k, pub := range m.streams {
		if k[0] == database {
			out = append(out, Stream{Slot: k[1], Publication: pub})
		}
	}
	return out, nil
}
