package kvindex

// OpKind is what an Op does.
type OpKind uint8

// Op kinds.
const (
	OpAdd    OpKind = iota // one more copy of Keys in Tier
	OpRemove               // one copy fewer of Keys in Tier
	OpClear                // drop everything in Tier (Keys unused)
)

// Op is one index change for a worker.
type Op struct {
	Kind OpKind
	Tier Tier
	Keys []uint64
}

// Change is the index changes of one event batch from one worker. Seq and
// Hash (of the batch's payload) name the batch, so a sink shared by several
// routers, each applying the same stream, can apply it once.
type Change struct {
	Worker    string
	Seq, Hash uint64
	// Reset drops everything the worker held before Ops: it restarted.
	Reset bool
	// ResetOnly marks a change that carries no batch (Seq and Hash are
	// meaningless): the restart was detected before the new process's
	// first batch arrived.
	ResetOnly bool
	Ops       []Op
}

// Sink takes a worker's index changes, one batch at a time, in order.
type Sink interface {
	Commit(c *Change) error
}

// Commit implements Sink for the in-memory index, which one router owns:
// every change applies.
func (x *Index) Commit(c *Change) error {
	if c.Reset {
		x.Clear(c.Worker)
	}
	for _, op := range c.Ops {
		switch op.Kind {
		case OpAdd:
			x.Add(c.Worker, op.Tier, op.Keys)
		case OpRemove:
			x.Remove(c.Worker, op.Tier, op.Keys)
		case OpClear:
			x.Clear(c.Worker, op.Tier)
		}
	}
	return nil
}

// Forget drops everything worker holds (it left the pool).
func (x *Index) Forget(worker string) error {
	x.Clear(worker)
	return nil
}
